"""Notification channels and their event journals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.model import ChannelConfig, ChannelDrops, StoredEvent


class ChannelStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def put_channel(self, channel: ChannelConfig) -> None:
        """Insert or replace the key's one channel (spec §2.5: the last one set wins)."""

    async def get_channel(self, key_id: str) -> ChannelConfig | None: ...
    async def delete_channel(self, key_id: str) -> bool:
        """Also deletes the channel's queued events."""

    async def list_channels(self, account_id: str | None = None) -> list[ChannelConfig]: ...

    async def add_channel_drops(self, key_id: str, drops: ChannelDrops) -> None:
        """Add to the key's lost-event counters (removed with the channel)."""

    async def get_channel_drops(self, key_id: str) -> ChannelDrops: ...
    async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None: ...
    async def load_events(self, key_id: str) -> list[StoredEvent]: ...
    async def drop_head_events(self, key_id: str, count: int) -> None: ...
