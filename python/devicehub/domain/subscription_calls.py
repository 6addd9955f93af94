"""The application's subscription calls on the device service (spec §3.1, §3.3): each checks the device is the
caller's first (another account's device is 404), then asks the router or the store."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from devicehub.domain.accounts import Principal
from devicehub.domain.model import Device, PresubscriptionRule
from devicehub.domain.paths import normalise
from devicehub.domain.request_checks import checked_rules, known_path
from devicehub.domain.storage.store import Store
from devicehub.domain.subscriptions import SubscriptionRouter
from devicehub.errors import NotFound, ResourceNotFound
from devicehub.ids import new_id


class SubscriptionCalls(ABC):
    """The calls; DeviceService (service.py) gives them its store, its router and its account check."""

    _store: Store

    @property
    @abstractmethod
    def router(self) -> SubscriptionRouter: ...

    @abstractmethod
    async def device_for(self, principal: Principal, device_id: str) -> Device: ...

    async def subscribe(self, principal: Principal, device_id: str, raw_path: str) -> str:
        device = await self.device_for(principal, device_id)
        pattern = normalise(raw_path, wildcard=True)
        if not pattern.endswith("*") and not known_path(device, pattern):
            raise ResourceNotFound(f"{device_id} has no resource {pattern}")
        async_id = new_id()
        await self.router.subscribe(principal.key_id, device, pattern, async_id)
        return async_id

    async def subscription_exists(self, principal: Principal, device_id: str, raw_path: str) -> bool:
        await self.device_for(principal, device_id)
        return normalise(raw_path, wildcard=True) in await self._store.list_subscriptions(principal.key_id, device_id)

    async def unsubscribe(self, principal: Principal, device_id: str, raw_path: str) -> None:
        await self.device_for(principal, device_id)
        if not await self.router.unsubscribe(principal.key_id, device_id, normalise(raw_path, wildcard=True)):
            raise NotFound("no such subscription")

    async def subscriptions(self, principal: Principal, device_id: str) -> list[str]:
        await self.device_for(principal, device_id)
        return await self._store.list_subscriptions(principal.key_id, device_id)

    async def unsubscribe_device(self, principal: Principal, device_id: str) -> None:
        await self.device_for(principal, device_id)
        await self.router.unsubscribe_device(principal.key_id, device_id)

    async def set_presubscriptions(self, principal: Principal, rules: Sequence[PresubscriptionRule]) -> None:
        clean = checked_rules(rules)
        await self._store.set_presubscriptions(principal.key_id, principal.account_id, clean)

    async def presubscriptions(self, principal: Principal) -> list[PresubscriptionRule]:
        return await self._store.get_presubscriptions(principal.key_id)
