"""Device credentials on Redis: a blob per record, a set per account."""

from __future__ import annotations

from typing import cast

from devicehub.domain.model import DeviceSharedKey, TrustedCa
from devicehub.domain.storage.credentials import KeyClaim
from devicehub.store.redis.codec import encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisCredentials(RedisConnection):
    """`CredentialStore` on Redis."""

    async def create_shared_key(self, key: DeviceSharedKey) -> KeyClaim:
        name = key.endpoint_name
        claim = await self._create_shared_key(
            keys=[
                self._k("psk", name),
                self._k("enroll", name),
                self._k("bootstrap", name),
                self._k("psks"),
                self._k("psks", key.account_id),
            ],
            args=[key.account_id, encode(key), name],
        )
        return cast(KeyClaim, text(claim))

    async def get_shared_key(self, endpoint_name: str) -> DeviceSharedKey | None:
        return await self._blob(DeviceSharedKey, self._k("psk", endpoint_name))

    async def list_shared_keys(
        self, account_id: str | None, *, after: str | None = None, limit: int = 1000
    ) -> list[DeviceSharedKey]:
        index = self._k("psks") if account_id is None else self._k("psks", account_id)
        names = sorted(n for n in (text(m) for m in await self.redis.smembers(index)) if n > (after or ""))
        return await self._blobs(DeviceSharedKey, [self._k("psk", n) for n in names[:limit]])

    async def delete_shared_key(self, endpoint_name: str) -> bool:
        key = await self.get_shared_key(endpoint_name)
        if key is None:
            return False
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("psk", endpoint_name))
            tx.srem(self._k("psks"), endpoint_name)
            tx.srem(self._k("psks", key.account_id), endpoint_name)
            await tx.execute()
        return True

    async def put_trusted_ca(self, ca: TrustedCa) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("ca", ca.id), encode(ca))
            tx.sadd(self._k("cas"), ca.id)
            tx.sadd(self._k("cas", ca.account_id), ca.id)
            await tx.execute()

    async def list_trusted_cas(self, account_id: str | None = None) -> list[TrustedCa]:
        index = self._k("cas") if account_id is None else self._k("cas", account_id)
        ids = sorted(text(m) for m in await self.redis.smembers(index))
        return await self._blobs(TrustedCa, [self._k("ca", i) for i in ids])

    async def delete_trusted_ca(self, ca_id: str) -> bool:
        ca = await self._blob(TrustedCa, self._k("ca", ca_id))
        if ca is None:
            return False
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("ca", ca_id))
            tx.srem(self._k("cas"), ca_id)
            tx.srem(self._k("cas", ca.account_id), ca_id)
            await tx.execute()
        return True
