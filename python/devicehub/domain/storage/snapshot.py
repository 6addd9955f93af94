"""The device state snapshot (spec §2.4): reported, desired and subscribed per resource."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.model import DesiredValue, ReportedValue, SnapshotResource


class SnapshotStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def set_reported(self, device_id: str, path: str, reported: ReportedValue) -> None: ...
    async def set_reported_many(self, values: Sequence[tuple[str, str, ReportedValue]]) -> None:
        """`set_reported` for each (device id, path, value), in order (a later one of a path replaces an earlier)."""

    async def set_desired(self, device_id: str, path: str, desired: DesiredValue) -> None: ...
    async def set_subscribed(self, device_id: str, path: str, subscribed: bool) -> None: ...
    async def clear_subscribed(self, device_id: str) -> None: ...
    async def ensure_resources(self, device_id: str, paths: Sequence[str]) -> None:
        """Add snapshot entries (no values) for new paths; existing ones are kept (spec §2.4 rule 3)."""

    async def get_snapshot(self, device_id: str) -> list[SnapshotResource]:
        """Ordered by path."""

    async def get_desired(self, device_id: str, path: str) -> DesiredValue | None:
        """One resource's desired value (what a write request updates), without reading the whole snapshot."""
