"""The channel event journal: what survives a restart of the queues, written behind in batches.

Guarantee: every queued event is appended to an in-memory pending list at push time, and a flusher task writes
the pending lists to the store (`append_events`) every `flush_interval_ms` (default 100 ms), together with the
number of events that left each queue from its head (delivered, dropped by the byte cap, expired) via
`drop_head_events`. An event that left its queue before the flush that would have written it is never written
(what a flush writes is what is still queued then). A graceful stop flushes everything, so it loses nothing;
after kill -9 the events queued during the last flush interval at most are lost, and deliveries of that interval
may be repeated (at least once).

The journal mirrors each queue in order: appends go to the tail, removals come from the head. The one case where
a queue loses events that are not at the journal's head (the byte cap or the lifetime dropping events queued
behind a batch that is out for delivery) is settled when the batch is: delivered, the batch and those events
leave the head together; given back, the key's whole journal is rewritten from a snapshot of the queue. A crash
before that brings such dropped events back (never loses others).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from devicehub.domain.model import ChannelDrops, StoredEvent
from devicehub.domain.storage.store import Store
from devicehub.errors import StorageUnavailable
from devicehub.outages import OutageLog

log = logging.getLogger("devicehub.channels.journal")


@dataclass(slots=True)
class _Pending:
    appends: list[StoredEvent] = field(default_factory=list)
    drops: int = 0
    rewrite: list[StoredEvent] | None = None  # replaces the whole stored journal before `appends`
    lost: ChannelDrops = field(default_factory=ChannelDrops)  # to add to the key's stored lost-event counters


class Journal:
    """Pending journal changes per key, flushed to the store by one writer task."""

    def __init__(self, store: Store, interval_s: float) -> None:
        self._store = store
        self._interval = interval_s
        self._pending: dict[str, _Pending] = {}
        self._stored: dict[str, int] = {}  # events of each key in the store
        self._lock = asyncio.Lock()  # one writer: flushes and deletions never interleave
        self._task: asyncio.Task[None] | None = None
        self._outage = OutageLog(log, "journal flush", time.monotonic)

    async def load(self, key_id: str) -> list[StoredEvent]:
        events = await self._store.load_events(key_id)
        self._stored[key_id] = len(events)
        return events

    async def load_drops(self, key_id: str) -> ChannelDrops:
        return await self._store.get_channel_drops(key_id)

    def count_lost(self, key_id: str, lost: ChannelDrops) -> None:
        """Events the key's queue lost (cap, lifetime, free-tier failure): counters that outlive a restart."""
        slot = self._slot(key_id)
        slot.lost = slot.lost + lost

    def append(self, key_id: str, event: StoredEvent) -> None:
        self._slot(key_id).appends.append(event)

    def drop(self, key_id: str, count: int) -> None:
        """`count` events left the key's queue from its head."""
        if count > 0:
            self._slot(key_id).drops += count

    def rewrite(self, key_id: str, events: list[StoredEvent]) -> None:
        """The key's queue is now exactly `events`; earlier pending changes are contained in it."""
        earlier = self._pending.get(key_id)
        self._pending[key_id] = _Pending(rewrite=events, lost=earlier.lost if earlier else ChannelDrops())

    @property
    def pending_events(self) -> int:
        return sum(len(p.appends) for p in self._pending.values())

    async def forget(self, key_id: str) -> None:
        """The channel is gone: drop its pending changes and its stored channel and events."""
        async with self._lock:
            self._pending.pop(key_id, None)
            self._stored.pop(key_id, None)
            await self._store.delete_channel(key_id)

    async def release(self, key_id: str) -> None:
        """Another node takes the channel over: write what is pending for it, then stop tracking it."""
        await self.flush()
        async with self._lock:
            self._pending.pop(key_id, None)
            self._stored.pop(key_id, None)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="channel-journal-flusher")

    async def stop(self) -> None:
        """Stop the flusher and write what is pending (graceful stop loses nothing)."""
        if self._task is not None:
            # cancelled only between flushes: a store write cancelled while its executor thread carries on would
            # land in the store uncounted, and the final flush would write those events a second time
            async with self._lock:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.flush()

    async def _run(self) -> None:
        # real time, not the injected clock: this bounds what a crash can lose, which is wall-clock time
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.flush()
            except StorageUnavailable:
                pass  # the store says so once a minute; what is pending stays for the next flush
            except Exception as error:  # Redis away: what is pending stays for the next flush
                self._outage.failed(error)
            else:
                self._outage.worked()

    async def flush(self) -> None:
        async with self._lock:
            work = list(self._pending.items())
            self._pending = {}
            for done, (key_id, pending) in enumerate(work):
                try:
                    await self._write(key_id, pending)
                except BaseException:
                    for unwritten_key, unwritten in work[done:]:
                        self._restore(unwritten_key, unwritten)
                    raise

    async def _write(self, key_id: str, pending: _Pending) -> None:
        # each step updates `pending` once done, so a failure part-way can be retried without repeating it
        if pending.rewrite is not None:
            if self._stored.get(key_id, 0):
                await self._store.drop_head_events(key_id, self._stored[key_id])
                self._stored[key_id] = 0
            pending.appends[:0] = pending.rewrite
            pending.rewrite = None
        stored = self._stored.get(key_id, 0)
        if pending.drops > stored and pending.appends:
            # issue 15: events queued and gone again (delivered, dropped) since the last flush never touch the disk;
            # the removals beyond what is stored take them off the head of what is still to append
            gone = min(pending.drops - stored, len(pending.appends))
            del pending.appends[:gone]
            pending.drops -= gone
        if pending.appends:
            await self._store.append_events(key_id, pending.appends)
            self._stored[key_id] = self._stored.get(key_id, 0) + len(pending.appends)
            pending.appends = []
        if pending.drops:
            count = min(pending.drops, self._stored.get(key_id, 0))
            if count:
                await self._store.drop_head_events(key_id, count)
                self._stored[key_id] -= count
            pending.drops = 0
        if pending.lost != ChannelDrops():
            await self._store.add_channel_drops(key_id, pending.lost)
            pending.lost = ChannelDrops()

    def _restore(self, key_id: str, unwritten: _Pending) -> None:
        """Put back what a failed flush did not write, ahead of what was recorded meanwhile."""
        newer = self._pending.get(key_id)
        if newer is not None and newer.rewrite is not None:
            newer.lost = unwritten.lost + newer.lost
            return  # a newer rewrite contains every older event
        if newer is not None:
            unwritten.appends.extend(newer.appends)
            unwritten.drops += newer.drops
            unwritten.lost = unwritten.lost + newer.lost
        self._pending[key_id] = unwritten

    def _slot(self, key_id: str) -> _Pending:
        pending = self._pending.get(key_id)
        if pending is None:
            pending = self._pending[key_id] = _Pending()
        return pending
