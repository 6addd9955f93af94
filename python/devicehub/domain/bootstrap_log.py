"""What a bootstrap session leaves in its account's records (issue 32 #3): a `bootstrapped` lifecycle event for the
device id its endpoint name has (claimed now if it had none: the Register that follows gets the same id), and the
account's bootstraps_successful / bootstraps_failed counts. A session of `serve --dev`'s stand-in configuration
belongs to no account and leaves nothing."""

from __future__ import annotations

from devicehub.clock import Clock
from devicehub.domain.device_log import BOOTSTRAPPED, new_event
from devicehub.domain.model import BootstrapConfig
from devicehub.domain.storage.store import Store
from devicehub.domain.usage import BOOTSTRAPS_FAILED, BOOTSTRAPS_SUCCESSFUL, UsageMeter
from devicehub.ids import new_device_id


class BootstrapLog:
    def __init__(self, store: Store, clock: Clock, usage: UsageMeter) -> None:
        self._store = store
        self._clock = clock
        self._usage = usage

    async def ended(self, config: BootstrapConfig, completed: bool) -> None:
        account_id = config.account_id
        if not account_id:
            return
        self._usage.count(account_id, BOOTSTRAPS_SUCCESSFUL if completed else BOOTSTRAPS_FAILED)
        if completed:
            device_id = await self._store.claim_device_id(account_id, config.endpoint_name, new_device_id)
            await self._store.put_device_events([new_event(account_id, device_id, BOOTSTRAPPED, self._clock.now())])
