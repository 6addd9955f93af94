"""Saved device directory filters on SQLite (table `saved_queries`, schema.py): the name is unique per account by the
table's own constraint, the count checked in the same transaction."""

from __future__ import annotations

import sqlite3

from devicehub.domain.saved_queries import MAX_PER_ACCOUNT, Saved, SavedQuery
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteSavedQueries(SqliteWriter):
    """`SavedQueryStore` on SQLite."""

    async def put_saved_query(self, query: SavedQuery, *, create: bool) -> Saved:
        def work(db: sqlite3.Connection) -> Saved:
            taken = db.execute(
                "SELECT id FROM saved_queries WHERE account_id = ? AND name = ?", (query.account_id, query.name)
            ).fetchone()
            if taken is not None and taken[0] != query.id:
                return Saved.NAME_TAKEN
            row = (query.account_id, query.id, query.name, encode(query))
            if create:
                if db.execute(
                    "SELECT 1 FROM saved_queries WHERE account_id = ? AND id = ?", (query.account_id, query.id)
                ).fetchone():
                    return Saved.NAME_TAKEN
                (count,) = db.execute(
                    "SELECT count(*) FROM saved_queries WHERE account_id = ?", (query.account_id,)
                ).fetchone()
                if count >= MAX_PER_ACCOUNT:
                    return Saved.FULL
                db.execute("INSERT INTO saved_queries (account_id, id, name, data) VALUES (?, ?, ?, ?)", row)
                return Saved.DONE
            changed = db.execute(
                "UPDATE saved_queries SET name = ?, data = ? WHERE account_id = ? AND id = ?",
                (query.name, encode(query), query.account_id, query.id),
            ).rowcount
            return Saved.DONE if changed else Saved.MISSING

        return await self._read(work)

    async def get_saved_query(self, account_id: str, query_id: str) -> SavedQuery | None:
        return await self._one(
            SavedQuery,
            "SELECT data FROM saved_queries WHERE account_id = ? AND id = ?",
            (account_id, query_id),
            reader=True,
        )

    async def list_saved_queries(self, account_id: str) -> list[SavedQuery]:
        return await self._all(
            SavedQuery, "SELECT data FROM saved_queries WHERE account_id = ? ORDER BY id", (account_id,), reader=True
        )

    async def delete_saved_query(self, account_id: str, query_id: str) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            return bool(
                db.execute("DELETE FROM saved_queries WHERE account_id = ? AND id = ?", (account_id, query_id)).rowcount
            )

        return await self._read(work)
