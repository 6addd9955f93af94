"""Token buckets per key (an API key, a device's address), on the injected clock (issue 14 #14), and the two bounds a
CoAP request from a source address and port passes: its own, and its host's (issue 28 #5)."""

from __future__ import annotations

import math
import socket
from collections.abc import Hashable
from typing import Literal

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

    def give_back(self, key: Hashable) -> None:
        """Return the token `take(key)` just spent: the request it let on was refused by another bound after all."""
        bucket = self._buckets.get(key)
        if bucket is not None:
            bucket.tokens = min(self.burst, bucket.tokens + 1.0)

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


_V4_MAPPED = bytes(10) + b"\xff\xff"  # ::ffff:a.b.c.d, an IPv4 peer of a dual-stack socket (RFC 4291 §2.5.5.2)


def host_of(address: str) -> str:
    """The host an IP address literal belongs to, for a per-host bound: an IPv4 address is one host; an IPv6
    address stands for its /64, since a host picks its own interface identifiers in its /64 at will (SLAAC,
    RFC 4862 §5.5.3; temporary addresses, RFC 8981) and networks are told to give a host a whole /64 (RFC 7934 §6)."""
    if ":" not in address:
        return address
    try:
        packed = socket.inet_pton(socket.AF_INET6, address.partition("%")[0])  # a link-local one's zone goes
    except OSError:
        return address  # not an IPv6 literal (a test's made-up name): a host of its own
    if packed.startswith(_V4_MAPPED):
        return socket.inet_ntop(socket.AF_INET, packed[12:])
    return socket.inet_ntop(socket.AF_INET6, packed[:8] + bytes(8)) + "/64"


Cause = Literal["address", "host"]


class SourceLimits:
    """Requests a second from one source (address, port), and from all the sources of one host (`host_of`): a host
    opening more ports must not multiply its allowance (issue 28 #5: 50 ports on one IP were answered 50 times as
    often). The address's own bucket is asked first, so one noisy port's excess is dropped before it can spend
    the allowance its host shares with its neighbours behind the same NAT; a request the host refuses gives its
    address's token back, so each dropped request is counted once, under one cause."""

    def __init__(self, clock: Clock, per_address: tuple[float, float], per_host: tuple[float, float]) -> None:
        self.addresses = TokenBuckets(clock, *per_address)
        self.hosts = TokenBuckets(clock, *per_host)

    def take(self, address: str, port: int) -> Cause | None:
        """None when the request may go on (a token of each bound is spent); else the bound that refused it."""
        source = (address, port)
        if self.addresses.take(source):
            return "address"
        if self.hosts.rate > 0 and self.hosts.take(host_of(address)):
            self.addresses.give_back(source)
            return "host"
        return None

    def sweep(self) -> None:
        self.addresses.sweep()
        self.hosts.sweep()
