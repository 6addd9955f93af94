"""Named leases, so that one node of several does a periodic job."""

from __future__ import annotations

from typing import Protocol


class LeaseStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        """Take or renew a named lease; False while another owner holds an unexpired one."""

    async def release_lease(self, name: str, owner: str) -> None: ...
