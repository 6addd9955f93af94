"""Named leases on SQLite: the domain's rule (domain/storage/leases.py) decided inside the writer's transaction."""

from __future__ import annotations

import sqlite3

from devicehub.domain.storage.leases import Lease, may_release, may_take
from devicehub.store.sqlite.writer import SqliteWriter


def _held(db: sqlite3.Connection, name: str) -> Lease | None:
    row = db.execute("SELECT owner, expires_at FROM leases WHERE name = ?", (name,)).fetchone()
    return None if row is None else Lease(owner=str(row[0]), expires_at=float(row[1]))


class SqliteLeases(SqliteWriter):
    """`LeaseStore` on SQLite."""

    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            if not may_take(_held(db, name), owner, now):
                return False
            db.execute(
                "INSERT OR REPLACE INTO leases (name, owner, expires_at) VALUES (?, ?, ?)",
                (name, owner, now + ttl_seconds),
            )
            return True

        return await self._read(work)

    async def release_lease(self, name: str, owner: str) -> None:
        def work(db: sqlite3.Connection) -> None:
            if may_release(_held(db, name), owner):
                db.execute("DELETE FROM leases WHERE name = ?", (name,))

        await self._write(work)
