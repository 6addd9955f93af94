"""Accounts and their API keys on Redis; a revocation is published to every node."""

from __future__ import annotations

import msgspec

from devicehub.domain.model import Account, ApiKey
from devicehub.store.redis import revocations
from devicehub.store.redis.codec import encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisAccounts(RedisConnection):
    """`AccountStore` on Redis."""

    async def _claim_account_name(self, account: Account) -> str:
        """The record first, then the name (the claim, create_account.lua), then the listing: whoever finds the name
        finds its record (issue 31: nodes started together); the loser of a claim takes its record back."""
        record = self.keys.acc("account", account.id)
        await self.redis.set(record, encode(account))
        winner = text(
            await self._create_account(keys=[self.keys.named("account_name", account.name)], args=[account.id])
        )
        if winner != account.id:
            await self.redis.delete(record)
            return winner
        await self.redis.sadd(self.keys.accounts, account.id)
        return winner

    async def create_account(self, account: Account) -> None:
        if await self._claim_account_name(account) != account.id:
            raise ValueError(f"account name {account.name!r} exists")

    async def ensure_account(self, account: Account) -> Account:
        winner = await self._claim_account_name(account)
        if winner == account.id:
            return account
        found = await self.get_account(winner)  # written with its name, in the same script
        if found is None:
            raise ValueError(f"account name {account.name!r} names no account record")
        return found

    async def get_account(self, account_id: str) -> Account | None:
        return await self._blob(Account, self.keys.acc("account", account_id))

    async def find_account_by_name(self, name: str) -> Account | None:
        account_id = await self.redis.get(self.keys.named("account_name", name))
        return None if account_id is None else await self.get_account(text(account_id))

    async def list_accounts(self) -> list[Account]:
        ids = sorted(text(i) for i in await self.redis.smembers(self.keys.accounts))
        accounts = await self._blobs(Account, [self.keys.acc("account", i) for i in ids])
        return sorted(accounts, key=lambda a: a.name)

    async def create_key(self, key: ApiKey) -> None:
        # three slots: the record, then what finds it (a crash between leaves a record nothing names)
        await self.redis.set(self.keys.key("key", key.id), encode(key))
        await self.redis.set(self.keys.named("key_hash", key.key_hash), key.id)
        await self.redis.zadd(self.keys.acc("keys", key.account_id), {key.id: key.created_at})

    async def find_key_by_hash(self, key_hash: str) -> ApiKey | None:
        key_id = await self.redis.get(self.keys.named("key_hash", key_hash))
        return None if key_id is None else await self._blob(ApiKey, self.keys.key("key", text(key_id)))

    async def list_keys(self, account_id: str) -> list[ApiKey]:
        ids = [text(i) for i in await self.redis.zrange(self.keys.acc("keys", account_id), 0, -1)]
        return await self._blobs(ApiKey, [self.keys.key("key", i) for i in ids])

    async def revoke_key(self, key_id: str, at: float) -> bool:
        key = await self._blob(ApiKey, self.keys.key("key", key_id))
        if key is None:
            return False
        if key.revoked_at is None:
            await self.redis.set(self.keys.key("key", key_id), encode(msgspec.structs.replace(key, revoked_at=at)))
        await revocations.announce(self.shard, self._p, key_id)  # every node's key cache drops it now
        return True
