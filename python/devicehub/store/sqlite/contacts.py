"""Last contact times on SQLite (table `device_contacts`, schema.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from devicehub.store.sqlite.writer import SqliteWriter


class SqliteContacts(SqliteWriter):
    """`ContactStore` on SQLite: one statement for a whole batch."""

    async def put_contacts(self, contacts: Sequence[tuple[str, str, float]]) -> None:
        if not contacts:
            return
        await self._write(
            lambda db: db.executemany(  # the callers' tuples as they are (numbered parameters): no copy of each
                "INSERT INTO device_contacts (device_id, account_id, contact_at) VALUES (?2, ?1, ?3)"
                " ON CONFLICT (device_id) DO UPDATE SET contact_at = max(contact_at, excluded.contact_at)",
                contacts,
            )
        )

    async def get_contacts(self, account_id: str, device_ids: Sequence[str]) -> dict[str, float]:
        def work(db: sqlite3.Connection) -> dict[str, float]:
            found: dict[str, float] = {}
            for start in range(0, len(device_ids), 500):  # SQLite's bound on host parameters
                part = device_ids[start : start + 500]
                marks = ",".join("?" * len(part))
                found.update(
                    db.execute(
                        "SELECT device_id, contact_at FROM device_contacts"
                        f" WHERE account_id = ? AND device_id IN ({marks})",
                        (account_id, *part),
                    ).fetchall()
                )
            return found

        return await self._query(work)

    async def delete_contacts(self, account_id: str, device_ids: Sequence[str]) -> None:
        await self._write(
            lambda db: db.executemany(
                "DELETE FROM device_contacts WHERE account_id = ? AND device_id = ?",
                [(account_id, d) for d in device_ids],
            )
        )
