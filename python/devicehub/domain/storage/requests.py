"""The device-request queue: guaranteed delivery that survives restarts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.model import DesiredValue, DeviceRequest


class RequestQueueStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def enqueue_request(
        self, request: DeviceRequest, max_pending: int = 0, desired: tuple[str, DesiredValue] | None = None
    ) -> None:
        """Queued in one step, or refused: DuplicateAsyncId while the key's async-id is pending, QueueFull when the
        device has `max_pending` requests waiting already (0: no bound). `desired`: (resource path, value) of the
        snapshot's desired value a write request makes pending (spec §3.1), stored with the request or not at all:
        a refused or failed call leaves neither (README "Durability" says what a crash leaves on SQLite)."""

    async def pending_requests(self, device_id: str) -> list[DeviceRequest]:
        """In enqueue order."""

    async def devices_with_pending_requests(self, device_ids: Sequence[str]) -> set[str]:
        """Those of `device_ids` with at least one queued request: one read for a batch of registrations."""

    async def all_pending_requests(self) -> list[DeviceRequest]: ...
    async def count_pending_requests(self) -> int:
        """How many requests wait, without reading them (the metrics gauge, scraped every few seconds)."""

    async def find_request(self, key_id: str, async_id: str) -> DeviceRequest | None: ...
    async def update_request(self, request: DeviceRequest) -> None: ...
    async def remove_request(self, key_id: str, async_id: str) -> bool: ...
