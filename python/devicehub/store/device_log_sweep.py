"""The retention of the device lifecycle history (issue 32 #3): events older than `--device-events-retention` go,
every SWEEP_INTERVAL_S, on one node of a cluster at a time (the holder of the sweep lease)."""

from __future__ import annotations

import logging

from devicehub.clock import Clock
from devicehub.domain.storage.store import Store
from devicehub.outages import OutageLog

log = logging.getLogger("devicehub.device_log")

SWEEP_INTERVAL_S = 600.0  # an event outlives the retention by at most this long
LEASE = "sweep:device-events"


async def sweep_device_events(store: Store, clock: Clock, retention_s: float, owner: str) -> None:
    """Run for ever: a store that fails is said once (then once a minute) and tried again next interval."""
    outage = OutageLog(log, "device event sweep", clock.now)
    while True:
        try:
            if await store.acquire_lease(LEASE, owner, SWEEP_INTERVAL_S * 2, clock.now()):
                removed = await store.sweep_device_events(clock.now() - retention_s)
                if removed:
                    log.info("removed %d device event(s) older than %.0f s", removed, retention_s)
            outage.worked()
        except Exception as error:
            outage.failed(error)
        await clock.sleep(SWEEP_INTERVAL_S)
