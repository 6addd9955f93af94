"""Token buckets per key (an API key, a device's address), on the injected clock (issue 14 #14)."""

from __future__ import annotations

import math
from collections.abc import Hashable

from devicehub.clock import Clock


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at


class TokenBuckets:
    """`rate` tokens a second per key, at most `burst` saved up; a rate of 0 means no limit.

    The table is bounded: a full bucket is the same as no bucket, so once it holds `max_keys` keys the full ones
    go; if a flood of made-up keys still fills it, the oldest go (they start again with a full bucket)."""

    def __init__(self, clock: Clock, rate: float, burst: float, *, max_keys: int = 100_000) -> None:
        self._clock = clock
        self.rate = rate
        self.burst = max(burst, 1.0)
        self._max_keys = max_keys
        self._buckets: dict[Hashable, _Bucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: Hashable) -> float:
        """0.0 when `key` may go on (a token is spent); otherwise the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self._clock.now()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._max_keys:
                self._shrink(now)
            bucket = self._buckets[key] = _Bucket(self.burst, now)
        else:
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate

    def retry_after(self, wait: float) -> int:
        """Whole seconds for a `Retry-After` header (RFC 9110 §10.2.3), at least 1."""
        return max(1, math.ceil(wait))

    def _shrink(self, now: float) -> None:
        self._forget_full(now)
        excess = len(self._buckets) - self._max_keys + 1
        for key in list(self._buckets)[: max(0, excess)]:
            del self._buckets[key]

    def _forget_full(self, now: float) -> None:
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.at) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]

    def sweep(self) -> None:
        """Forget the buckets that have filled up again (they mean nothing any more)."""
        self._forget_full(self._clock.now())
