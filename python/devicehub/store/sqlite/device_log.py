"""Device lifecycle history on SQLite (table `device_log`, schema.py): written inside the transaction of the change it
records (registrations.py), each device trimmed to its newest MAX_PER_DEVICE there and then."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from devicehub.domain.device_log import MAX_PER_DEVICE, DeviceEventRecord, time_bound
from devicehub.store.record_upgrades import decode
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.writer import SqliteWriter


def insert_events(db: sqlite3.Connection, events: Sequence[DeviceEventRecord]) -> None:
    """Part of the caller's transaction: the events, then each of their devices cut to its newest MAX_PER_DEVICE."""
    if not events:
        return
    db.executemany(
        "INSERT OR REPLACE INTO device_log (id, account_id, device_id, at, data) VALUES (?, ?, ?, ?, ?)",
        [(e.id, e.account_id, e.device_id, e.at, encode(e)) for e in events],
    )
    db.executemany(
        "DELETE FROM device_log WHERE device_id = ? AND id <= (SELECT id FROM device_log WHERE device_id = ?"
        " ORDER BY id DESC LIMIT 1 OFFSET ?)",
        [(d, d, MAX_PER_DEVICE) for d in {e.device_id for e in events}],
    )


class SqliteDeviceLog(SqliteWriter):
    """`DeviceLogStore` on SQLite."""

    async def put_device_events(self, events: Sequence[DeviceEventRecord]) -> None:
        if events:
            await self._write(lambda db: insert_events(db, events))

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
        sql = "SELECT data FROM device_log WHERE account_id = ?"
        args: list[object] = [account_id]
        if device_ids is not None:
            if not device_ids:
                return []
            sql += f" AND device_id IN ({','.join('?' * len(device_ids))})"
            args += device_ids
        if after is not None:
            sql += " AND id < ?" if descending else " AND id > ?"
            args.append(after)
        if since is not None:
            sql += " AND id >= ?"
            args.append(time_bound(since))
        if until is not None:
            sql += " AND id < ?"
            args.append(time_bound(until + 0.001))
        sql += f" ORDER BY id {'DESC' if descending else 'ASC'} LIMIT ?"
        args.append(limit)

        def work(db: sqlite3.Connection) -> list[DeviceEventRecord]:
            return [decode(DeviceEventRecord, row[0]) for row in db.execute(sql, args)]

        return await self._query(work)

    async def get_device_event(self, account_id: str, event_id: str) -> DeviceEventRecord | None:
        return await self._one(
            DeviceEventRecord,
            "SELECT data FROM device_log WHERE id = ? AND account_id = ?",
            (event_id, account_id),
            reader=True,
        )

    async def sweep_device_events(self, before: float) -> int:
        def work(db: sqlite3.Connection) -> int:
            return db.execute("DELETE FROM device_log WHERE at < ?", (before,)).rowcount

        return await self._read(work)
