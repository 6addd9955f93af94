"""Enrolment and device ids on SQLite: claims are made in memory (endpoint_directory.py) and stored with the device."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from devicehub.store.sqlite.writer import SqliteWriter


def _claimed(db: sqlite3.Connection, account_id: str, endpoint_name: str) -> str | None:
    """The stored device id of (account, name), if any."""
    # devices written before device_ids existed keep their id
    for table in ("devices", "device_ids"):
        row = db.execute(
            f"SELECT id FROM {table} WHERE account_id = ? AND endpoint_name = ?", (account_id, endpoint_name)
        )
        found = row.fetchone()
        if found is not None:
            return str(found[0])
    return None


class SqliteEnrolment(SqliteWriter):
    """`EnrolmentStore` on SQLite."""

    async def enroll(self, account_id: str, endpoint_name: str) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO enrollments (endpoint_name, account_id) VALUES (?, ?)",
                (endpoint_name, account_id),
            )
        )
        self._directory.enrolled_committed(endpoint_name, account_id)

    async def enrolled_account(self, endpoint_name: str) -> str | None:
        return self._directory.enrolled(endpoint_name)

    async def claim_device_id(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str:
        if not self.write_health.failing:
            return self._directory.reserve(account_id, endpoint_name, mint)
        known = self._directory.known(account_id, endpoint_name)
        if known is not None:
            return known
        candidate = mint()

        def work(db: sqlite3.Connection) -> str:
            # while writes fail the claim is written on its own, at once, as before issue 16: a full disk answers
            # the Register 5.03 (issue 14 #9) rather than holding an id that no table has
            stored = _claimed(db, account_id, endpoint_name)
            if stored is not None:
                return stored
            db.execute(
                "INSERT INTO device_ids (account_id, endpoint_name, id) VALUES (?, ?, ?)",
                (account_id, endpoint_name, candidate),
            )
            return candidate

        device_id = await self._read(work)
        self._directory.stored(account_id, endpoint_name, device_id)
        return device_id

    async def admit_authenticated(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str | None:
        owner = self._directory.enrolled(endpoint_name)
        if owner is None:
            # the first authenticated Register of a name enrols it (issue 28 #1); the row that wins is read back in
            # the same transaction, so of two credentials racing for one name (or a key being created for it) the
            # one committed first holds it and the directory learns which
            def work(db: sqlite3.Connection) -> str:
                db.execute(
                    "INSERT OR IGNORE INTO enrollments (endpoint_name, account_id) VALUES (?, ?)",
                    (endpoint_name, account_id),
                )
                row = db.execute("SELECT account_id FROM enrollments WHERE endpoint_name = ?", (endpoint_name,))
                return str(row.fetchone()[0])

            owner = await self._read(work)
            self._directory.enrolled_committed(endpoint_name, owner)
        if owner != account_id:
            return None
        return await self.claim_device_id(account_id, endpoint_name, mint)

    async def admit_endpoint(
        self, endpoint_name: str, default_account_id: str | None, mint: Callable[[], str]
    ) -> tuple[str, str] | None:
        account_id = self._directory.enrolled(endpoint_name) or default_account_id
        if account_id is None:
            return None
        return account_id, await self.claim_device_id(account_id, endpoint_name, mint)
