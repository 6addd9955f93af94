"""Named leases, so that one node of several does a periodic job; the rule of who may take one is stated here once."""

from __future__ import annotations

from typing import Protocol

import msgspec


class Lease(msgspec.Struct, frozen=True):
    """Who holds a named lease, and until when (seconds on the holder's clock)."""

    owner: str
    expires_at: float


def may_take(held: Lease | None, owner: str, now: float) -> bool:
    """A lease is taken or renewed unless another owner holds it unexpired. Each store decides with this inside the
    step that writes the lease (a SQLite transaction; a Redis WATCH/MULTI), so two nodes cannot both take it."""
    return held is None or held.owner == owner or held.expires_at <= now


def may_release(held: Lease | None, owner: str) -> bool:
    """Only the owner ends its lease: one that expired and was taken by another node stays that node's."""
    return held is not None and held.owner == owner


class LeaseStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        """Take or renew a named lease (`may_take`); False while another owner holds an unexpired one."""

    async def release_lease(self, name: str, owner: str) -> None:
        """End the lease if `owner` holds it (`may_release`)."""
