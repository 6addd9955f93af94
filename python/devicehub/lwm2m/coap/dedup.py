"""The message layer's de-duplication (RFC 7252 §4.5): (remote, message ID) seen within EXCHANGE_LIFETIME, and the
reply each got, so a retransmission is answered with the same bytes instead of being handled twice."""

from __future__ import annotations

from collections import OrderedDict

from devicehub.clock import Clock
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.coap.parameters import EXCHANGE_LIFETIME


class Deduplicator:
    """Bounded by entries and by cached-reply bytes, oldest dropped first (issue 14 #4): a retransmission after its
    entry was dropped is handled again, never refused."""

    def __init__(self, clock: Clock, max_entries: int, max_bytes: int) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        # (remote, mid) → encoded reply (None while the handler runs); in receipt order
        self._seen: OrderedDict[tuple[Address, int], tuple[float, bytes | None]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._seen)

    def first(self, remote: Address, mid: int) -> bool:
        """True for a message ID not seen from `remote` within the window (it is recorded now); False for a
        retransmission, whose cached reply `reply_for` gives."""
        now = self._clock.now()
        self.prune(now)
        key = (remote, mid)
        if key in self._seen:
            return False
        self._seen[key] = (now, None)
        if len(self._seen) > self._max_entries:
            self._forget_oldest()
        return True

    def reply_for(self, remote: Address, mid: int) -> bytes | None:
        """The reply sent to this message (None while it is being handled)."""
        entry = self._seen.get((remote, mid))
        return None if entry is None else entry[1]

    def remember(self, remote: Address, mid: int, reply: bytes) -> None:
        """What was answered to (remote, mid), for its retransmissions; the window runs from the receipt."""
        key = (remote, mid)
        entry = self._seen.get(key)
        seen_at, previous = (self._clock.now(), None) if entry is None else entry
        self.bytes += len(reply) - (len(previous) if previous is not None else 0)
        self._seen[key] = (seen_at, reply)
        while self.bytes > self._max_bytes and self._seen:
            self._forget_oldest()

    def forget(self, remote: Address, mid: int) -> None:
        """Not seen after all (a request dropped unhandled): its retransmission is taken as new."""
        entry = self._seen.pop((remote, mid), None)
        if entry is not None and entry[1] is not None:
            self.bytes -= len(entry[1])

    def _forget_oldest(self) -> None:
        _, (_, reply) = self._seen.popitem(last=False)
        if reply is not None:
            self.bytes -= len(reply)

    def prune(self, now: float) -> None:
        """Drop the entries older than EXCHANGE_LIFETIME (§4.8.2: no retransmission comes after it)."""
        seen = self._seen
        while seen:
            seen_at, _ = next(iter(seen.values()))
            if now - seen_at < EXCHANGE_LIFETIME:
                break
            self._forget_oldest()
