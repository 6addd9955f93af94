"""Last contact times on SQLite (table `device_contacts`, schema.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from operator import itemgetter

from devicehub.store.sqlite.writer import SqliteWriter

# numbered parameters: the callers' (account_id, device_id, contact_at) tuples bind as they are, no copy of each;
# max(): a contact time never goes back, whatever order the writes of one device arrive in
_UPSERT = (
    "INSERT INTO device_contacts (device_id, account_id, contact_at) VALUES (?2, ?1, ?3)"
    " ON CONFLICT (device_id) DO UPDATE SET contact_at = max(contact_at, excluded.contact_at)"
)
_DEVICE = itemgetter(1)


class SqliteContacts(SqliteWriter):
    """`ContactStore` on SQLite: one statement for a whole batch."""

    async def put_contacts(self, contacts: Sequence[tuple[str, str, float]]) -> None:
        if not contacts:
            return
        # issue 30 #1: a fleet's batch comes in the order its devices talked, scattered over the table; in device id
        # order, each page of the table (one B-tree keyed by device id, schema.py) is found once and its rows updated
        # one after the other while it is in the page cache. Sorted in the writer thread, not on the event loop.
        await self._write(lambda db: db.executemany(_UPSERT, sorted(contacts, key=_DEVICE)))

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
