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
        keys = [self._k("account_name", account.name), self._k("account", account.id), self._k("accounts")]
        return text(await self._create_account(keys=keys, args=[account.id, encode(account)]))

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
        return await self._blob(Account, self._k("account", account_id))

    async def find_account_by_name(self, name: str) -> Account | None:
        account_id = await self.redis.get(self._k("account_name", name))
        return None if account_id is None else await self.get_account(text(account_id))

    async def list_accounts(self) -> list[Account]:
        ids = sorted(text(i) for i in await self.redis.smembers(self._k("accounts")))
        accounts = await self._blobs(Account, [self._k("account", i) for i in ids])
        return sorted(accounts, key=lambda a: a.name)

    async def create_key(self, key: ApiKey) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("key", key.id), encode(key))
            tx.set(self._k("key_hash", key.key_hash), key.id)
            tx.zadd(self._k("keys", key.account_id), {key.id: key.created_at})
            await tx.execute()

    async def find_key_by_hash(self, key_hash: str) -> ApiKey | None:
        key_id = await self.redis.get(self._k("key_hash", key_hash))
        return None if key_id is None else await self._blob(ApiKey, self._k("key", text(key_id)))

    async def list_keys(self, account_id: str) -> list[ApiKey]:
        ids = [text(i) for i in await self.redis.zrange(self._k("keys", account_id), 0, -1)]
        return await self._blobs(ApiKey, [self._k("key", i) for i in ids])

    async def revoke_key(self, key_id: str, at: float) -> bool:
        key = await self._blob(ApiKey, self._k("key", key_id))
        if key is None:
            return False
        if key.revoked_at is None:
            await self.redis.set(self._k("key", key_id), encode(msgspec.structs.replace(key, revoked_at=at)))
        await self.redis.publish(revocations.channel(self._p), key_id)  # every node's key cache drops it now
        return True
