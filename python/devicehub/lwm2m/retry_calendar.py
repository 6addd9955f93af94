"""When a shed Register is told to come back (issue 16 #2): CoAP 5.03 with a Max-Age (RFC 7252 §5.9.3.4) that
books the device into the first second still open, each second filled up to a little more than the node stores in
a second (`OVERBOOK`).

A random Max-Age over a fixed range (5-60 s, as before) kept a storm's retries from coming back together but not
from coming back later than needed: a device shed in the first second of a storm could be sent a minute away while
the node idled, and a storm of 100 000 could not end within a minute whatever the node's speed. Booking the seconds
at the node's own rate (the most it stored a second over the last minute, and a quarter more to find out
whether it can take more) brings the retries back about as fast as they can be taken. The devices shed within
one second come back spread over their second as they arrived (Max-Age is whole seconds); no second is booked
beyond what the registration backlog holds (`most_per_second`), or its returns are shed again on arrival.
"""

from __future__ import annotations

import math
from collections import deque

# the soonest a shed device is told to come back (the backlog needs a moment to drain), and the latest
LEAST_S = 2
MOST_S = 120
# seconds booked at this rate at least, when the node admitted fewer (a node just started, or one whose store is
# slow): the booked returns are spread, not all sent to the first open second
MIN_RATE = 10
# the node's rate is the most it stored in `SMOOTH_S` seconds running over this many seconds: while it sheds, the
# devices that arrive are only those booked, so its admissions show the booking rate, not what it can take; a rate
# read from the last second alone fell with each round of bookings (a storm of 100 000 offered at 4 000/s ran at
# 750/s)
RATE_MEMORY_S = 60
# issue 30 #4: the rate is what the node *stores* a second (its registration writer's drain), not what it admits: a
# storm's first second admits the whole backlog at once (2 000 and more), and a rate read from admissions booked
# every second after it at that, more than twice what the node drains; the returns beyond the drain were shed
# again, each a round trip on both sides (10 000 devices offered at 4× capacity: 31 389 sheds, goodput 0.73 of 1×).
# Batches end in lumps, so the count is taken over a few seconds running. Until a batch has been stored (the first
# moments of a storm) the admissions are all there is to go by.
SMOOTH_S = 3
# seconds are booked this much above that rate: a rate seen while the node was also shedding (and, on a shared
# machine, while the storm's senders took CPU) is less than it can take once the fresh Registers stop, and a node
# booked at exactly its peak admits exactly the bookings, so the peak never rises again (100 000 offered at 4 000/s
# then returned at ~1 000/s for a minute while the node could take ~1 900/s). Above it, a second that gets more
# than the node takes sheds the excess again into later seconds, and one it takes raises the peak.
OVERBOOK = 1.25


class RetryCalendar:
    """Booked returns per wall-clock second, and the registrations stored (the node's rate) and admitted per second."""

    def __init__(
        self,
        least_s: int = LEAST_S,
        most_s: int = MOST_S,
        min_rate: int = MIN_RATE,
        overbook: float = OVERBOOK,
        most_per_second: int | None = None,
    ) -> None:
        self.least_s, self.most_s, self._min_rate, self._overbook = least_s, most_s, min_rate, overbook
        # at most the node's registration backlog a second: the devices booked into one second come back within it
        # together, and those beyond what the backlog holds were shed again on arrival, into later seconds (a
        # 100 000 storm: 166 066 sheds and 51.8 s booked at the peak, 88 372 and 47.0 s capped at the backlog)
        self._most_per_second = most_per_second
        self._booked: dict[int, int] = {}  # second → devices told to come back then
        self._open_from = 0  # no second before this one has room (a booking scan starts here)
        self._second = 0  # the second `_stored_now` and `_admitted_now` count
        self._stored_now = 0
        self._admitted_now = 0
        self._stored: deque[tuple[int, int]] = deque()  # (second, stored) of the whole seconds remembered
        self._admitted_peak = 0  # the most admitted in a whole second remembered (before anything was stored)
        self._admitted: deque[tuple[int, int]] = deque()
        self._peak = 0.0  # the most stored a second, `SMOOTH_S` running, over the seconds remembered

    def admitted(self, now: float) -> None:
        """A Register was admitted at `now`."""
        self._roll(int(now))
        self._admitted_now += 1

    def stored(self, now: float, count: int) -> None:
        """`count` registrations were stored at `now` (they leave the backlog)."""
        self._roll(int(now))
        self._stored_now += count

    def rate(self, now: float) -> int:
        """Returns booked a second: a quarter above the node's rate, within the floor and the backlog."""
        self._roll(int(now))
        if self._stored or self._stored_now:
            measured = max(self._peak, self._stored_now)
        else:
            measured = max(self._admitted_peak, self._admitted_now)
        rate = max(self._min_rate, math.ceil(measured * self._overbook))
        if self._most_per_second is not None:
            rate = min(rate, max(self._min_rate, self._most_per_second))
        return rate

    def retry_after(self, now: float) -> int:
        """Seconds until the device shed at `now` should register again: the first second from `least_s` on that
        is not full, else `most_s`."""
        second = int(now)
        rate = self.rate(now)
        start = max(second + self.least_s, self._open_from)
        for slot in range(start, second + self.most_s):
            booked = self._booked.get(slot, 0)
            if booked < rate:
                self._booked[slot] = booked + 1
                self._open_from = slot
                return slot - second
        return self.most_s

    @property
    def booked(self) -> int:
        """Returns booked for the seconds still ahead (tests, metrics)."""
        return sum(self._booked.values())

    def _roll(self, second: int) -> None:
        if second == self._second:
            return
        if self._stored_now:
            self._stored.append((self._second, self._stored_now))
        if self._admitted_now:
            self._admitted.append((self._second, self._admitted_now))
        for seconds in (self._stored, self._admitted):
            while seconds and seconds[0][0] <= second - RATE_MEMORY_S:
                seconds.popleft()
        # once a second at most, over at most RATE_MEMORY_S entries
        self._admitted_peak = max((count for _, count in self._admitted), default=0)
        # a window reaches back no further than the node's first admission remembered: the seconds before it it
        # had nothing to store, and the rate of a storm's first seconds is not divided by them
        counts = dict(self._stored)
        since = min((seconds[0][0] for seconds in (self._stored, self._admitted) if seconds), default=self._second)
        self._peak = max(
            (sum(counts.get(s - k, 0) for k in range(SMOOTH_S)) / min(SMOOTH_S, s - since + 1) for s in counts),
            default=0.0,
        )
        self._stored_now, self._admitted_now, self._second = 0, 0, second
        for past in [s for s in self._booked if s <= second]:  # at most `most_s` entries, once a second
            del self._booked[past]
