"""Dead letters of a cursor channel (issue 34 #5): which events the byte cap or the lifetime took off its queue.

The events themselves stay in the cursor log while retained (cursors.py), so this keeps only their cursor
ranges and causes, bounded to the newest MAX_DEAD_LETTERS. A redrive queues the retained ones again at the tail,
each with a new cursor and its original device_seq (cursors stay in queue order; the device_seq tells an
application where the event stands among its device's).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from devicehub.channels.cursors import Retained

MAX_DEAD_LETTERS = 1000
BYTE_CAP = "byte_cap"
LIFETIME = "lifetime"


class DeadRange(NamedTuple):
    first: int
    last: int
    cause: str


class DeadLetters:
    def __init__(self, limit: int = MAX_DEAD_LETTERS) -> None:
        self.limit = limit
        self.ranges: deque[DeadRange] = deque()
        self._count = 0

    def add(self, first: int, last: int, cause: str) -> None:
        if last < first:
            return
        self.ranges.append(DeadRange(first, last, cause))
        self._count += last - first + 1
        while self._count > self.limit:  # the oldest go first
            head = self.ranges.popleft()
            excess = self._count - self.limit
            size = head.last - head.first + 1
            if size > excess:
                self.ranges.appendleft(DeadRange(head.first + excess, head.last, head.cause))
                self._count -= excess
            else:
                self._count -= size

    def select(self, retained: deque[Retained]) -> list[tuple[Retained, str]]:
        """The retained events among the dead letters, oldest first, with their cause."""
        found: list[tuple[Retained, str]] = []
        ranges = iter(self.ranges)
        current = next(ranges, None)
        for item in retained:
            while current is not None and current.last < item.cursor:
                current = next(ranges, None)
            if current is None:
                break
            if current.first <= item.cursor:
                found.append((item, current.cause))
        return found

    def clear(self) -> None:
        self.ranges.clear()
        self._count = 0
