"""Account-owned LwM2M object definitions on SQLite."""

from __future__ import annotations

import sqlite3

from devicehub.domain.object_model import AccountObject
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteAccountObjects(SqliteWriter):
    """`AccountObjectStore` on SQLite (table `lwm2m_objects`, schema.py)."""

    async def put_account_object(self, stored: AccountObject, *, replace: bool) -> bool:
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"

        def work(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                f"{verb} INTO lwm2m_objects (account_id, object_id, data) VALUES (?, ?, ?)",
                (stored.account_id, stored.definition.id, encode(stored)),
            )
            return cursor.rowcount > 0

        return await self._read(work)

    async def get_account_object(self, account_id: str, object_id: int) -> AccountObject | None:
        return await self._one(
            AccountObject,
            "SELECT data FROM lwm2m_objects WHERE account_id = ? AND object_id = ?",
            (account_id, object_id),
        )

    async def list_account_objects(self, account_id: str) -> list[AccountObject]:
        return await self._all(
            AccountObject, "SELECT data FROM lwm2m_objects WHERE account_id = ? ORDER BY object_id", (account_id,)
        )

    async def delete_account_object(self, account_id: str, object_id: int) -> bool:
        return await self._read(
            lambda db: (
                db.execute(
                    "DELETE FROM lwm2m_objects WHERE account_id = ? AND object_id = ?", (account_id, object_id)
                ).rowcount
                > 0
            )
        )
