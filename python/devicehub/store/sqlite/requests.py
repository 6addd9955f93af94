"""The device-request queue on SQLite: its own file (request_file.py), written by a thread in Rust."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.model import (
    DeviceRequest,
)
from devicehub.store.enqueue import check_enqueued
from devicehub.store.sqlite.codec import decode, encode
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteRequests(SqliteWriter):
    """`RequestQueueStore` on SQLite."""

    async def enqueue_request(self, request: DeviceRequest, max_pending: int = 0) -> None:
        outcome = await self._requests.enqueue(
            request.key_id, request.async_id, request.device_id, encode(request), max_pending
        )
        check_enqueued(outcome, request, max_pending)

    async def pending_requests(self, device_id: str) -> list[DeviceRequest]:
        return [decode(DeviceRequest, data) for data in await self._requests.pending(device_id)]

    async def devices_with_pending_requests(self, device_ids: Sequence[str]) -> set[str]:
        return await self._requests.devices_with_pending(list(dict.fromkeys(device_ids)))

    async def all_pending_requests(self) -> list[DeviceRequest]:
        return [decode(DeviceRequest, data) for data in await self._requests.all()]

    async def count_pending_requests(self) -> int:
        return await self._requests.count()

    async def find_request(self, key_id: str, async_id: str) -> DeviceRequest | None:
        data = await self._requests.find(key_id, async_id)
        return None if data is None else decode(DeviceRequest, data)

    async def update_request(self, request: DeviceRequest) -> None:
        await self._requests.update(request.key_id, request.async_id, encode(request))

    async def remove_request(self, key_id: str, async_id: str) -> bool:
        return await self._requests.remove(key_id, async_id)
