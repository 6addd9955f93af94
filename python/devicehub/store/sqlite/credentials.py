"""Device credentials on SQLite: pre-shared keys and trusted CAs."""

from __future__ import annotations

import sqlite3

from devicehub.domain.model import DeviceSharedKey, TrustedCa
from devicehub.domain.storage.credentials import KeyClaim
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteCredentials(SqliteWriter):
    """`CredentialStore` on SQLite."""

    async def create_shared_key(self, key: DeviceSharedKey) -> KeyClaim:
        name, account_id = key.endpoint_name, key.account_id

        def work(db: sqlite3.Connection) -> KeyClaim:
            held = db.execute("SELECT account_id FROM shared_keys WHERE endpoint_name = ?", (name,)).fetchone()
            if held is not None:
                return "exists" if held[0] == account_id else "taken"
            for table in ("enrollments", "bootstrap_configs"):
                row = db.execute(f"SELECT account_id FROM {table} WHERE endpoint_name = ?", (name,)).fetchone()
                if row is not None and row[0] != account_id:
                    return "taken"
            db.execute(
                "INSERT INTO shared_keys (endpoint_name, account_id, data) VALUES (?, ?, ?)",
                (name, account_id, encode(key)),
            )
            db.execute(
                "INSERT OR IGNORE INTO enrollments (endpoint_name, account_id) VALUES (?, ?)", (name, account_id)
            )
            return "created"

        claim = await self._read(work)
        if claim == "created":
            self._directory.enrolled_committed(name, account_id)
        return claim

    async def get_shared_key(self, endpoint_name: str) -> DeviceSharedKey | None:
        return await self._one(
            DeviceSharedKey, "SELECT data FROM shared_keys WHERE endpoint_name = ?", (endpoint_name,)
        )

    async def list_shared_keys(
        self, account_id: str | None, *, after: str | None = None, limit: int = 1000
    ) -> list[DeviceSharedKey]:
        where, args = "endpoint_name > ?", [after or ""]
        if account_id is not None:
            where, args = where + " AND account_id = ?", [*args, account_id]
        return await self._all(
            DeviceSharedKey,
            f"SELECT data FROM shared_keys WHERE {where} ORDER BY endpoint_name LIMIT ?",
            (*args, limit),
        )

    async def delete_shared_key(self, endpoint_name: str) -> bool:
        return await self._read(
            lambda db: db.execute("DELETE FROM shared_keys WHERE endpoint_name = ?", (endpoint_name,)).rowcount > 0
        )

    async def put_trusted_ca(self, ca: TrustedCa) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO trusted_cas (id, account_id, data) VALUES (?, ?, ?)",
                (ca.id, ca.account_id, encode(ca)),
            )
        )

    async def list_trusted_cas(self, account_id: str | None = None) -> list[TrustedCa]:
        if account_id is None:
            return await self._all(TrustedCa, "SELECT data FROM trusted_cas ORDER BY id", ())
        return await self._all(
            TrustedCa, "SELECT data FROM trusted_cas WHERE account_id = ? ORDER BY id", (account_id,)
        )

    async def delete_trusted_ca(self, ca_id: str) -> bool:
        return await self._read(lambda db: db.execute("DELETE FROM trusted_cas WHERE id = ?", (ca_id,)).rowcount > 0)
