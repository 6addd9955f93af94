"""Device lifecycle history (issue 32 #3): the events of `domain/device_log.py`, listed by time per account."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.device_log import DeviceEventRecord


class DeviceLogStore(Protocol):
    """Events are written by `put_registrations(events=)` and `remove_registration(event=)` (the writes they record)
    and by `put_device_events` (a Bootstrap-Finish, which writes nothing else)."""

    async def put_device_events(self, events: Sequence[DeviceEventRecord]) -> None: ...

    async def list_device_events(
        self,
        account_id: str,
        *,
        device_ids: Sequence[str] | None = None,
        after: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        descending: bool = False,
    ) -> list[DeviceEventRecord]:
        """The account's events by id (time, then device) from the cursor on, of `device_ids` when given, at `since`
        or later and `until` or earlier."""

    async def get_device_event(self, account_id: str, event_id: str) -> DeviceEventRecord | None: ...

    async def sweep_device_events(self, before: float) -> int:
        """Remove every event older than `before`; how many went (Redis: the account index entries)."""
