"""Per-account usage counters on SQLite (table `account_usage`, schema.py): one upsert statement per flush."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from devicehub.domain.usage import UsageRow
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteUsage(SqliteWriter):
    """`UsageStore` on SQLite."""

    async def add_usage(self, rows: Sequence[UsageRow]) -> None:
        if rows:
            await self._write(
                lambda db: db.executemany(
                    "INSERT INTO account_usage (account_id, hour, metric, n) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (account_id, hour, metric) DO UPDATE SET n = n + excluded.n",
                    rows,
                )
            )

    async def set_usage(self, rows: Sequence[UsageRow]) -> None:
        if rows:
            await self._write(
                lambda db: db.executemany(
                    "INSERT INTO account_usage (account_id, hour, metric, n) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (account_id, hour, metric) DO UPDATE SET n = excluded.n",
                    rows,
                )
            )

    async def get_usage(self, account_id: str, start: float, end: float) -> dict[int, dict[str, int]]:
        def work(db: sqlite3.Connection) -> dict[int, dict[str, int]]:
            found: dict[int, dict[str, int]] = {}
            for hour, metric, n in db.execute(
                "SELECT hour, metric, n FROM account_usage WHERE account_id = ? AND hour >= ? AND hour < ?",
                (account_id, start, end),
            ):
                found.setdefault(int(hour), {})[str(metric)] = int(n)
            return found

        return await self._query(work)

    async def sweep_usage(self, before: float) -> None:
        await self._write(lambda db: db.execute("DELETE FROM account_usage WHERE hour < ?", (before,)))
