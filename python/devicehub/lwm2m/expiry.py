"""When registrations expire: a heap of expiry times, O(log n) per registration or update and per expiry
(issue 16 #3), instead of a scan of every registration each second."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator


class ExpiryHeap:
    """(expires_at, device id, version) entries; an entry whose version is no longer the device's is dropped when it
    comes up (lazy deletion), and the heap is rebuilt when such leftovers outnumber live entries."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, str, float]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, device_id: str, expires_at: float, version: float) -> None:
        heapq.heappush(self._heap, (expires_at, device_id, version))

    def due(self, now: float, current: Callable[[str], float | None]) -> Iterator[str]:
        """Pop and yield each device whose expiry time is before `now` and whose entry is still its current one
        (`current(device_id)` is the device's version now, None when it is gone)."""
        heap = self._heap
        while heap and heap[0][0] < now:
            _, device_id, version = heapq.heappop(heap)
            if current(device_id) == version:
                yield device_id

    def compact(self, live: int, entries: Iterator[tuple[str, float, float]]) -> None:
        """Rebuild from the live (device id, expires_at, version) entries when leftovers dominate."""
        if len(self._heap) <= 2 * live + 1024:
            return
        self._heap = [(expires_at, device_id, version) for device_id, expires_at, version in entries]
        heapq.heapify(self._heap)
