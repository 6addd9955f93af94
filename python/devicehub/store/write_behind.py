"""Reported values written behind: the snapshot's hot path (one value per device notification) coalesced per
(device, path) and written in one batch every `interval` seconds, by both store backends.

Readers either call `flush()` first or lay `pending_for()` (pending and in-flight values) over what the store
returned, re-reading when a flush completed meanwhile (`completed`), so they read their own writes; `close()`
writes what is pending, so a graceful stop loses nothing; a crash can lose the values of the last interval
(README, "Durability").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from devicehub.domain.model import ReportedValue
from devicehub.outages import unavailable

log = logging.getLogger("devicehub.store")

# Issue 30 #1: path → device id → latest value. Keyed by device first, a fleet of many devices each notifying
# rarely gave every value a dict of its own (made in `put`, encoded as a map, merged into the log's per-device dict,
# freed), ~2 µs a value more at 50 000 devices than at 200 on the event loop. A flush's values fall under the few
# paths the devices notify (a device type's resources, not the fleet), so a value is one entry of a dict that a flush
# makes per path, and the log merges a flush path by path with one `dict.update` each. Reads of one device look under
# each path: their cost grows with the paths in the batch, not with the devices.
Pending = dict[str, dict[str, ReportedValue]]
Reported = tuple[str, str, ReportedValue]  # (device id, path, value)

DEFAULT_INTERVAL_S = 0.05


class ReportedWriteBehind:
    def __init__(self, write: Callable[[Pending], Awaitable[None]], interval: float = DEFAULT_INTERVAL_S) -> None:
        self._write = write
        self._interval = interval
        self._retry_interval = max(interval, 1.0)
        self._pending: Pending = {}
        self._writing: list[Pending] = []  # taken by a flush, not committed yet (oldest first)
        # devices discarded while a flush held their values: if it fails, theirs are not put back (a delete's
        # tombstone went after that flush; its retry would write them again). Cleared once nothing is in flight
        self._discarded_in_flight: set[str] = set()
        self.completed = 0  # flushes finished (committed or failed): a reader that saw it move re-reads
        self._timer: asyncio.TimerHandle | None = None
        self._completion: asyncio.Future[None] | None = None  # resolved at the next flush's end (`settle` waits on it)
        self._flushes: set[asyncio.Task[None]] = set()

    @property
    def interval(self) -> float:
        """Seconds a value waits here at most before its batch is written (the README's durability bound)."""
        return self._interval

    def put(self, device_id: str, path: str, value: ReportedValue) -> None:
        values = self._pending.get(path)
        if values is None:
            values = self._pending[path] = {}
        values[device_id] = value
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._flush_soon)

    def pending_for(self, device_id: str) -> dict[str, ReportedValue]:
        """Values of the device not written yet, by path (what a reader lays over the store's rows)."""
        values: dict[str, ReportedValue] = {}
        for batch in (*self._writing, self._pending):  # newest last: a newer value replaces an older one
            for path, devices in batch.items():
                value = devices.get(device_id)
                if value is not None:
                    values[path] = value
        return values

    def holds(self, device_id: str, path: str) -> bool:
        """A value of (device, path) waits here or is being written: a newer one must come through `put`, after it."""
        return _held(self._unwritten(), device_id, path)

    def writing(self, device_id: str) -> bool:
        """A flush in flight holds a value of the device: its write was queued before anything queued now."""
        return any(device_id in devices for batch in self._writing for devices in batch.values())

    async def settle(self, device_id: str) -> None:
        """The device's values written or failed: the pending ones flushed, then each flush in flight holding one
        ended. `flush()` alone does not wait for a flush already in flight, whose write may land after what the caller
        does next (a delete: the values' keys written again after it)."""
        await self.flush()
        while self.writing(device_id):
            if self._completion is None:
                self._completion = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._completion)  # a cancelled waiter leaves it for the others

    def discard(self, device_id: str) -> None:
        """The device's pending values dropped (it is being deleted: a later flush would write them back), and its
        values in a flush in flight not put back if that flush fails."""
        pending = self._pending
        for path, devices in list(pending.items()):
            if devices.pop(device_id, None) is not None and not devices:
                del pending[path]  # an empty batch is no batch: nothing to flush, nothing held
        if self._writing:  # the batch in flight is the writer thread's to read: not changed, only not put back
            self._discarded_in_flight.add(device_id)

    def split_held(self, values: Sequence[Reported]) -> tuple[list[Reported], list[Reported]]:
        """`values` in two: those free to be written now, and those `holds` says must come after a held one. A
        registration storm announces thousands of values a batch while nothing is held (issue 16: two `holds` per
        value were a tenth of the event loop's samples)."""
        batches = self._unwritten()
        if not batches:
            return list(values), []
        free: list[Reported] = []
        held: list[Reported] = []
        for item in values:
            (held if _held(batches, item[0], item[1]) else free).append(item)
        return free, held

    def _unwritten(self) -> list[Pending]:
        """The batches being written, oldest first, then the pending one; empty ones left out."""
        return [batch for batch in (*self._writing, self._pending) if batch]

    def _flush_soon(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is None:
            return
        if not unavailable(error):
            log.error("writing reported values failed; they stay pending", exc_info=error)
        # the store said why (once a minute); the values stay pending and the next timer tries again
        if self._timer is None and self._pending:
            self._timer = asyncio.get_running_loop().call_later(self._retry_interval, self._flush_soon)

    async def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        self._writing.append(pending)
        try:
            await self._write(pending)
        except BaseException:
            for path, devices in pending.items():  # keep what failed, unless a newer value arrived meanwhile
                for device_id in self._discarded_in_flight.intersection(devices):
                    del devices[device_id]
                if not devices:
                    continue
                newer = self._pending.get(path)
                if newer:
                    devices.update(newer)
                self._pending[path] = devices
            raise
        finally:
            self._writing.remove(pending)
            if not self._writing:
                self._discarded_in_flight.clear()
            self.completed += 1
            completion, self._completion = self._completion, None
            if completion is not None:
                completion.set_result(None)

    async def close(self) -> None:
        await self.flush()
        await asyncio.gather(*self._flushes, return_exceptions=True)


def _held(batches: list[Pending], device_id: str, path: str) -> bool:
    return any(device_id in batch.get(path, ()) for batch in batches)
