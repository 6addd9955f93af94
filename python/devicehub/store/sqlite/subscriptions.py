"""Resource subscriptions and presubscriptions on SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from devicehub.domain.model import PresubscriptionRule
from devicehub.store.sqlite.codec import RULES, encode
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteSubscriptions(SqliteWriter):
    """`SubscriptionStore` on SQLite."""

    async def add_subscription(self, key_id: str, device_id: str, path: str) -> None:
        if self._cache.has_subscription(device_id, key_id, path):
            return  # stored and not removed since: the INSERT OR IGNORE would change nothing (issue 15)
        epoch = self._cache.epoch(device_id)
        await self._write(
            lambda db: db.execute(
                "INSERT OR IGNORE INTO subscriptions (key_id, device_id, path) VALUES (?, ?, ?)",
                (key_id, device_id, path),
            )
        )
        self._cache.fill_subscription(device_id, key_id, path, epoch)

    async def remove_subscription(self, key_id: str, device_id: str, path: str) -> bool:
        self._cache.drop_subscriptions(device_id)
        removed = await self._read(
            lambda db: (
                db.execute(
                    "DELETE FROM subscriptions WHERE key_id = ? AND device_id = ? AND path = ?",
                    (key_id, device_id, path),
                ).rowcount
                > 0
            )
        )
        self._cache.drop_subscriptions(device_id)
        return removed

    async def list_subscriptions(self, key_id: str, device_id: str) -> list[str]:
        return await self._query(
            lambda db: [
                str(r[0])
                for r in db.execute(
                    "SELECT path FROM subscriptions WHERE key_id = ? AND device_id = ? ORDER BY path",
                    (key_id, device_id),
                )
            ]
        )

    async def remove_device_subscriptions(self, device_id: str, key_id: str | None = None) -> int:
        sql = "DELETE FROM subscriptions WHERE device_id = ?"
        args: tuple[str, ...] = (device_id,)
        if key_id is not None:
            sql, args = sql + " AND key_id = ?", (device_id, key_id)
        self._cache.drop_subscriptions(device_id)
        removed = await self._read(lambda db: int(db.execute(sql, args).rowcount))
        self._cache.drop_subscriptions(device_id)
        return removed

    async def subscribers(self, device_id: str) -> list[tuple[str, str]]:
        return await self._read(
            lambda db: [
                (str(r[0]), str(r[1]))
                for r in db.execute(
                    "SELECT key_id, path FROM subscriptions WHERE device_id = ? ORDER BY key_id, path", (device_id,)
                )
            ]
        )

    async def set_presubscriptions(self, key_id: str, account_id: str, rules: Sequence[PresubscriptionRule]) -> None:
        def work(db: sqlite3.Connection) -> None:
            if rules:
                db.execute(
                    "INSERT OR REPLACE INTO presubscriptions (key_id, account_id, rules) VALUES (?, ?, ?)",
                    (key_id, account_id, encode(list(rules))),
                )
            else:
                db.execute("DELETE FROM presubscriptions WHERE key_id = ?", (key_id,))

        await self._write(work)

    async def get_presubscriptions(self, key_id: str) -> list[PresubscriptionRule]:
        def work(db: sqlite3.Connection) -> list[PresubscriptionRule]:
            row = db.execute("SELECT rules FROM presubscriptions WHERE key_id = ?", (key_id,)).fetchone()
            return [] if row is None else RULES.decode(row[0])

        return await self._read(work)

    async def account_presubscriptions(self, account_id: str) -> list[tuple[str, list[PresubscriptionRule]]]:
        return await self._read(
            lambda db: [
                (str(r[0]), RULES.decode(r[1]))
                for r in db.execute(
                    "SELECT key_id, rules FROM presubscriptions WHERE account_id = ? ORDER BY key_id", (account_id,)
                )
            ]
        )
