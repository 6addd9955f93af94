"""Cursors and per-device sequences of a channel that asks for them (issue 34 #1, #2), and what it retains.

Opt-in with `{"serialization": {"cfg": {"include_cursor": true}}}`. Each event the channel queues gets the next
cursor (its ordinal in the channel: 1, 2, 3 … with no holes, so a count of what was missed is a subtraction) and,
when it came from a device, that device's next sequence number on this channel. Both are spliced into the
event's JSON object when it is queued (`…,"cursor":N,"device_seq":n}`), so the bytes the queue and the journal
hold are the bytes delivered, and a replay sends exactly what was sent the first time.

The log retains every event after it has left the queue, for the channel's retention time (default the spec's
24 h) and within its byte cap, so an application can come back with a cursor and get what came after it. The
journal mirrors this log (not the queue) for such a channel; the queue's head is known at a restart from the
counts of events that left it (`ChannelDrops.left_queue`), which the journal keeps too.
"""

from __future__ import annotations

import re
from collections import deque
from typing import NamedTuple

from devicehub._core import EVENT_OVERHEAD_BYTES
from devicehub.domain.model import StoredEvent

RECENT_ORIGINS = 20_000  # ids of the newest forwarded events kept: an owner drains at most DRAIN_BATCH a key at once
_TAIL = re.compile(rb',"cursor":(\d+)(?:,"device_seq":(\d+))?}\Z')


def cursor_of(data: bytes) -> int | None:
    """The cursor stamped into an event's bytes (None when it carries none)."""
    match = _TAIL.search(data)
    return int(match[1]) if match is not None else None


class Retained(NamedTuple):
    cursor: int
    event: StoredEvent


class CursorLog:
    """The cursors given so far, each device's last sequence number, and the retained events, oldest first."""

    def __init__(self, retention_ms: int, max_bytes: int) -> None:
        self.retention_ms = retention_ms
        self.max_bytes = max_bytes
        self.last = 0  # the last cursor given
        self.events: deque[Retained] = deque()
        self.bytes = 0
        self._devices: dict[str, int] = {}
        self._origins: dict[str, None] = {}  # the newest forwarded events' ids, oldest first (Redis mode)

    def first_time(self, origin: str) -> bool:
        """Whether a forwarded event with this id is new here (and remember it)."""
        origins = self._origins
        if origin in origins:
            return False
        origins[origin] = None
        if len(origins) > RECENT_ORIGINS:
            del origins[next(iter(origins))]
        return True

    def stamp(self, data: bytes, device: str) -> bytes:
        """Give the next cursor (and the device's next sequence number) and return the event's bytes with them.

        Only a JSON object gets the fields (a deregistration is one with this option, see encode.py); bytes a
        node encoded under older options stay as they are but still take their cursor, so the count holds.
        """
        self.last += 1
        if not data.endswith(b"}"):
            return data
        if device:
            seq = self._devices.get(device, 0) + 1
            self._devices[device] = seq
            return b'%s,"cursor":%d,"device_seq":%d}' % (data[:-1], self.last, seq)
        return b'%s,"cursor":%d}' % (data[:-1], self.last)

    def restamp(self, data: bytes) -> bytes:
        """A retained event queued again as a new one (a dead letter redriven): the next cursor, its device_seq
        kept (it says where the event stands among its device's)."""
        self.last += 1
        match = _TAIL.search(data)
        if match is None:
            return data
        seq = b',"device_seq":%s' % match[2] if match[2] is not None else b""
        return b'%s,"cursor":%d%s}' % (data[: match.start()], self.last, seq)

    def keep(self, event: StoredEvent) -> None:
        """Retain the event just stamped."""
        self.events.append(Retained(self.last, event))
        self.bytes += len(event.data) + EVENT_OVERHEAD_BYTES

    def evict(self, queue_head: int, now_ms: int, queued_bytes: int) -> int:
        """Let go of the oldest events that have left the queue (cursor below `queue_head`) and are past the
        retention time, or beyond the byte cap counting only such events (the queue holds `queued_bytes` under its
        own cap: a channel holds at most twice its cap); returns how many. An event still queued is never let go
        here: the queue's own rules (cap, lifetime) decide about it."""
        count = 0
        events = self.events
        while events and events[0].cursor < queue_head:
            head = events[0]
            if self.bytes - queued_bytes <= self.max_bytes and now_ms - head.event.queued_at_ms <= self.retention_ms:
                break
            events.popleft()
            self.bytes -= len(head.event.data) + EVENT_OVERHEAD_BYTES
            count += 1
        return count

    def after(self, cursor: int) -> tuple[list[StoredEvent], int]:
        """The retained events after `cursor`, and how many after it are no longer retained."""
        first = self.events[0].cursor if self.events else self.last + 1
        lost = max(0, first - (cursor + 1))
        return [r.event for r in self.events if r.cursor > cursor], lost

    def restore(self, events: list[StoredEvent], left_queue: int) -> list[StoredEvent]:
        """Rebuild from the journal (the retained events) and the count of events that left the queue since the
        channel began; returns the events still to deliver, oldest first."""
        head = left_queue + 1  # without a readable cursor, every journaled event is taken as undelivered
        for index, event in enumerate(events):
            match = _TAIL.search(event.data)
            if match is not None:
                head = int(match[1]) - index
                break
        for event in events[-RECENT_ORIGINS:]:
            if event.origin:
                self._origins[event.origin] = None
        for index, event in enumerate(events):
            self.events.append(Retained(head + index, event))
            self.bytes += len(event.data) + EVENT_OVERHEAD_BYTES
            match = _TAIL.search(event.data) if event.device else None
            if match is not None and match[2] is not None:
                self._devices[event.device] = max(self._devices.get(event.device, 0), int(match[2]))
        self.last = max(head + len(events) - 1, left_queue)
        return [r.event for r in self.events if r.cursor > left_queue]

    def assign(self, events: list[StoredEvent], base: int) -> None:
        """Opting in with events queued: they take the cursors after `base` (their bytes, encoded before, carry
        none) and are retained like any other."""
        self.last = base
        for event in events:
            self.last += 1
            self.keep(event)
