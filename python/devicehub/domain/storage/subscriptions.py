"""Resource subscriptions and presubscription rules, per API key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.model import PresubscriptionRule


class SubscriptionStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def add_subscription(self, key_id: str, device_id: str, path: str) -> None: ...
    async def remove_subscription(self, key_id: str, device_id: str, path: str) -> bool: ...
    async def list_subscriptions(self, key_id: str, device_id: str) -> list[str]: ...
    async def remove_device_subscriptions(self, device_id: str, key_id: str | None = None) -> int:
        """Every key's when key_id is None (a full registration drops them all, spec §2.1)."""

    async def subscribers(self, device_id: str) -> list[tuple[str, str]]:
        """(key_id, path) pairs of every resource subscription on the device."""

    async def set_presubscriptions(
        self, key_id: str, account_id: str, rules: Sequence[PresubscriptionRule]
    ) -> None: ...
    async def get_presubscriptions(self, key_id: str) -> list[PresubscriptionRule]: ...
    async def account_presubscriptions(self, account_id: str) -> list[tuple[str, list[PresubscriptionRule]]]:
        """(key_id, rules) for every key of the account that has rules."""
