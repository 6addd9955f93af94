"""Bootstrap configurations on SQLite."""

from __future__ import annotations

import sqlite3

from devicehub.domain.model import BootstrapConfig
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteBootstrapConfigs(SqliteWriter):
    """`BootstrapConfigStore` on SQLite."""

    async def put_bootstrap_config(self, config: BootstrapConfig) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            name = config.endpoint_name
            owner = db.execute("SELECT account_id FROM bootstrap_configs WHERE endpoint_name = ?", (name,)).fetchone()
            enrolled = db.execute("SELECT account_id FROM enrollments WHERE endpoint_name = ?", (name,)).fetchone()
            if any(row is not None and row[0] != config.account_id for row in (owner, enrolled)):
                return False
            db.execute(
                "INSERT OR REPLACE INTO bootstrap_configs (endpoint_name, account_id, data) VALUES (?, ?, ?)",
                (name, config.account_id, encode(config)),
            )
            return True

        return await self._read(work)

    async def get_bootstrap_config(self, endpoint_name: str) -> BootstrapConfig | None:
        return await self._one(
            BootstrapConfig, "SELECT data FROM bootstrap_configs WHERE endpoint_name = ?", (endpoint_name,)
        )

    async def list_bootstrap_configs(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[BootstrapConfig]:
        return await self._all(
            BootstrapConfig,
            "SELECT data FROM bootstrap_configs WHERE account_id = ? AND endpoint_name > ? ORDER BY endpoint_name"
            " LIMIT ?",
            (account_id, after if after is not None else "", limit),
        )

    async def delete_bootstrap_config(self, account_id: str, endpoint_name: str) -> bool:
        return await self._read(
            lambda db: (
                db.execute(
                    "DELETE FROM bootstrap_configs WHERE endpoint_name = ? AND account_id = ?",
                    (endpoint_name, account_id),
                ).rowcount
                > 0
            )
        )
