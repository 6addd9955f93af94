"""Accounts and their API keys on SQLite."""

from __future__ import annotations

import sqlite3

import msgspec

from devicehub.domain.model import Account, ApiKey
from devicehub.store.record_upgrades import decode
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteAccounts(SqliteWriter):
    """`AccountStore` on SQLite."""

    async def create_account(self, account: Account) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT INTO accounts (id, name, data) VALUES (?, ?, ?)", (account.id, account.name, encode(account))
            )
        )

    async def ensure_account(self, account: Account) -> Account:
        await self._write(
            lambda db: db.execute(
                "INSERT INTO accounts (id, name, data) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING",
                (account.id, account.name, encode(account)),
            )
        )
        found = await self.find_account_by_name(account.name)
        if found is None:  # the name's account was deleted between the two steps (no caller deletes accounts)
            raise ValueError(f"account name {account.name!r} names no account")
        return found

    async def get_account(self, account_id: str) -> Account | None:
        return await self._one(Account, "SELECT data FROM accounts WHERE id = ?", (account_id,), reader=True)

    async def find_account_by_name(self, name: str) -> Account | None:
        return await self._one(Account, "SELECT data FROM accounts WHERE name = ?", (name,))

    async def list_accounts(self) -> list[Account]:
        return await self._all(Account, "SELECT data FROM accounts ORDER BY name", ())

    async def create_key(self, key: ApiKey) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT INTO api_keys (id, account_id, key_hash, created_at, data) VALUES (?, ?, ?, ?, ?)",
                (key.id, key.account_id, key.key_hash, key.created_at, encode(key)),
            )
        )

    async def find_key_by_hash(self, key_hash: str) -> ApiKey | None:
        return await self._one(ApiKey, "SELECT data FROM api_keys WHERE key_hash = ?", (key_hash,), reader=True)

    async def list_keys(self, account_id: str) -> list[ApiKey]:
        return await self._all(
            ApiKey, "SELECT data FROM api_keys WHERE account_id = ? ORDER BY created_at, id", (account_id,)
        )

    async def revoke_key(self, key_id: str, at: float) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT data FROM api_keys WHERE id = ?", (key_id,)).fetchone()
            if row is None:
                return False
            key = decode(ApiKey, row[0])
            if key.revoked_at is None:
                db.execute(
                    "UPDATE api_keys SET data = ? WHERE id = ?",
                    (encode(msgspec.structs.replace(key, revoked_at=at)), key_id),
                )
            return True

        return await self._read(work)
