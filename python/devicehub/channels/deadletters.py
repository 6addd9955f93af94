"""Dead letters of a channel (issue 34 #5): the events the byte cap or the lifetime took off its queue.

Every channel kind keeps them (callback, WebSocket, pull; with or without cursors): the Rust queue hands back what
it removes (`ChannelQueue.take_dropped`), and the channel moves it here the next time it accounts its drops. The
list is bounded to the newest MAX_DEAD_LETTERS events and MAX_DEAD_LETTER_BYTES of them (the oldest go first): a
channel that overflows is already at its byte cap, and the list must not double it. A redrive queues them again at
the tail as new events; a cursor channel gives each a new cursor and keeps its original device_seq (cursors stay in
queue order; the device_seq tells an application where the event stands among its device's).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from devicehub._core import EVENT_OVERHEAD_BYTES, ChannelQueue
from devicehub.channels.cursors import cursor_of

MAX_DEAD_LETTERS = 1000
MAX_DEAD_LETTER_BYTES = 5 * 1024 * 1024  # a tenth of the spec §8 byte cap
BYTE_CAP = "byte_cap"
LIFETIME = "lifetime"


class DeadLetter(NamedTuple):
    kind: int
    data: bytes  # the event as it was queued (a cursor channel's carries its cursor and device_seq)
    queued_at_ms: int
    cause: str  # BYTE_CAP | LIFETIME
    cursor: int | None  # a cursor channel's event: its cursor


class DeadLetters:
    def __init__(self, limit: int = MAX_DEAD_LETTERS, max_bytes: int = MAX_DEAD_LETTER_BYTES) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self.letters: deque[DeadLetter] = deque()
        self.bytes = 0
        self.discarded = 0  # dead letters let go to stay within the bounds

    def __len__(self) -> int:
        return len(self.letters)

    def collect(self, queue: ChannelQueue) -> None:
        """Move what the queue removed since the last call here (called only when its drop counts moved)."""
        for kind, data, queued_at_ms, cause in queue.take_dropped():
            self.letters.append(DeadLetter(kind, data, queued_at_ms, cause, cursor_of(data)))
            self.bytes += len(data) + EVENT_OVERHEAD_BYTES
        while self.letters and (len(self.letters) > self.limit or self.bytes > self.max_bytes):
            head = self.letters.popleft()
            self.bytes -= len(head.data) + EVENT_OVERHEAD_BYTES
            self.discarded += 1

    def take_all(self) -> list[DeadLetter]:
        """Every dead letter, oldest first; the list is empty afterwards (a redrive)."""
        letters = list(self.letters)
        self.letters.clear()
        self.bytes = 0
        return letters
