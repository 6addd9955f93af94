"""Per-account usage counters by the hour (issue 32 #3): the sums of `domain/usage.py`'s meters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.usage import UsageRow


class UsageStore(Protocol):
    async def add_usage(self, rows: Sequence[UsageRow]) -> None:
        """Add each count to the stored one (several nodes' counts add up)."""

    async def set_usage(self, rows: Sequence[UsageRow]) -> None:
        """Replace each stored value by this one (a gauge's sample: domain/usage.py GAUGES)."""

    async def get_usage(self, account_id: str, start: float, end: float) -> dict[int, dict[str, int]]:
        """The account's counts of the hours that start at `start` or later and before `end`: hour → metric → n."""

    async def sweep_usage(self, before: float) -> None:
        """Forget the hours before `before`."""
