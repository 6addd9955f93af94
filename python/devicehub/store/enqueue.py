"""The outcome of queueing a device request, as both stores report it (SQLite in its transaction, Redis from
`lua/enqueue_request.lua`), turned into the typed refusal the API answers."""

from __future__ import annotations

from devicehub.domain.model import DeviceRequest
from devicehub.errors import DuplicateAsyncId, QueueFull

QUEUED, DUPLICATE, QUEUE_FULL = 0, 1, 2


def check_enqueued(outcome: int, request: DeviceRequest, max_pending: int) -> None:
    if outcome == DUPLICATE:
        raise DuplicateAsyncId(f"async-id {request.async_id!r} is still pending")
    if outcome == QUEUE_FULL:
        raise QueueFull(f"{max_pending} requests already wait for this device")
