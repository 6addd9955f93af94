"""Named leases on SQLite."""

from __future__ import annotations

import sqlite3

from devicehub.store.sqlite.writer import SqliteWriter


class SqliteLeases(SqliteWriter):
    """`LeaseStore` on SQLite."""

    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT owner, expires_at FROM leases WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] != owner and row[1] > now:
                return False
            db.execute(
                "INSERT OR REPLACE INTO leases (name, owner, expires_at) VALUES (?, ?, ?)",
                (name, owner, now + ttl_seconds),
            )
            return True

        return await self._read(work)

    async def release_lease(self, name: str, owner: str) -> None:
        await self._write(lambda db: db.execute("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner)))
