"""Notification channels and their event journals on SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from devicehub.domain.model import ChannelConfig, ChannelDrops, StoredEvent
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteChannels(SqliteWriter):
    """`ChannelStore` on SQLite."""

    async def put_channel(self, channel: ChannelConfig) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO channels (key_id, account_id, data) VALUES (?, ?, ?)",
                (channel.key_id, channel.account_id, encode(channel)),
            )
        )

    async def get_channel(self, key_id: str) -> ChannelConfig | None:
        return await self._one(ChannelConfig, "SELECT data FROM channels WHERE key_id = ?", (key_id,))

    async def delete_channel(self, key_id: str) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            db.execute("DELETE FROM channel_events WHERE key_id = ?", (key_id,))
            db.execute("DELETE FROM channel_drops WHERE key_id = ?", (key_id,))
            return db.execute("DELETE FROM channels WHERE key_id = ?", (key_id,)).rowcount > 0

        return await self._read(work)

    async def list_channels(self, account_id: str | None = None) -> list[ChannelConfig]:
        if account_id is None:
            return await self._all(ChannelConfig, "SELECT data FROM channels ORDER BY key_id", ())
        return await self._all(
            ChannelConfig, "SELECT data FROM channels WHERE account_id = ? ORDER BY key_id", (account_id,)
        )

    async def add_channel_drops(self, key_id: str, drops: ChannelDrops) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO channel_drops (key_id, overflow, expired, failed, delivered) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (key_id) DO UPDATE SET overflow = overflow + excluded.overflow,"
                " expired = expired + excluded.expired, failed = failed + excluded.failed,"
                " delivered = delivered + excluded.delivered",
                (key_id, drops.overflow, drops.expired, drops.failed, drops.delivered),
            )

        await self._write(work)

    async def get_channel_drops(self, key_id: str) -> ChannelDrops:
        def work(db: sqlite3.Connection) -> ChannelDrops:
            row = db.execute(
                "SELECT overflow, expired, failed, delivered FROM channel_drops WHERE key_id = ?", (key_id,)
            ).fetchone()
            return ChannelDrops(*map(int, row)) if row else ChannelDrops()

        return await self._read(work)

    async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None:
        def work(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT MAX(seq) FROM channel_events WHERE key_id = ?", (key_id,)).fetchone()
            start = (row[0] if row[0] is not None else -1) + 1
            db.executemany(
                "INSERT INTO channel_events (key_id, seq, kind, data, queued_at_ms, device) VALUES (?, ?, ?, ?, ?, ?)",
                [(key_id, start + i, e.kind, e.data, e.queued_at_ms, e.device) for i, e in enumerate(events)],
            )

        if events:
            await self._write(work)

    async def load_events(self, key_id: str) -> list[StoredEvent]:
        return await self._read(
            lambda db: [
                StoredEvent(int(r[0]), bytes(r[1]), int(r[2]), str(r[3]))
                for r in db.execute(
                    "SELECT kind, data, queued_at_ms, device FROM channel_events WHERE key_id = ? ORDER BY seq",
                    (key_id,),
                )
            ]
        )

    async def drop_head_events(self, key_id: str, count: int) -> None:
        if count <= 0:
            return
        await self._write(
            lambda db: db.execute(
                "DELETE FROM channel_events WHERE key_id = ? AND seq IN"
                " (SELECT seq FROM channel_events WHERE key_id = ? ORDER BY seq LIMIT ?)",
                (key_id, key_id, count),
            )
        )
