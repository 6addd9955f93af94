"""The device-request queue on SQLite: its own file (request_file.py), written by a thread in Rust.

A write request's desired value (spec §3.1) lives in the main file's snapshot, so queueing the two is two commits in
two files by two writers (the queue's is a Rust thread that needs no GIL, issue 16): one SQLite transaction cannot
hold both. The request is committed first and taken back out when the desired value's write fails, so a caller that
hears a failure finds neither. A crash between the two commits leaves the request queued without its pending desired
value: it is delivered as any other, and the device's answer records the desired value then (with its own status
time), so the snapshot misses only the pending state of that one write."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.model import DesiredValue, DeviceRequest
from devicehub.store.enqueue import check_enqueued
from devicehub.store.record_upgrades import decode
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.snapshot import SqliteSnapshot


class SqliteRequests(SqliteSnapshot):  # a write request's desired value is in the snapshot
    """`RequestQueueStore` on SQLite."""

    async def enqueue_request(
        self, request: DeviceRequest, max_pending: int = 0, desired: tuple[str, DesiredValue] | None = None
    ) -> None:
        outcome = await self._requests.enqueue(
            request.key_id, request.async_id, request.device_id, encode(request), max_pending
        )
        check_enqueued(outcome, request, max_pending)
        if desired is None:
            return
        try:
            await self.set_desired(request.device_id, *desired)
        except Exception:
            # the caller hears this failure (503), so the request must not stay queued and be delivered later
            await self._requests.remove(request.key_id, request.async_id)
            raise

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
