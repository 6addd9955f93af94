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
        k = self.keys
        # the name's slot decides (create_shared_key.lua); then the indexes list it (readers check the record)
        claim = await self._create_shared_key(
            keys=[k.ep("psk", name), k.ep("enroll", name), k.ep("bootstrap", name), k.ep("psk_account", name)],
            args=[key.account_id, encode(key)],
        )
        if text(claim) == "created":
            await self.redis.sadd(self.keys.bucket("psks", name), name)
            await self.redis.sadd(self.keys.acc("psks", key.account_id), name)
        return cast(KeyClaim, text(claim))

    async def get_shared_key(self, endpoint_name: str) -> DeviceSharedKey | None:
        return await self._blob(DeviceSharedKey, self.keys.ep("psk", endpoint_name))

    async def list_shared_keys(
        self, account_id: str | None, *, after: str | None = None, limit: int = 1000
    ) -> list[DeviceSharedKey]:
        indexes = self.keys.buckets("psks") if account_id is None else [self.keys.acc("psks", account_id)]
        names = sorted(n for n in await self._members(indexes) if n > (after or ""))
        found: list[DeviceSharedKey] = []
        while names and len(found) < limit:  # an entry whose record is gone, or moved, is skipped
            page, names = names[: limit - len(found)], names[limit - len(found) :]
            keys = await self._blobs(DeviceSharedKey, [self.keys.ep("psk", n) for n in page])
            found += [k for k in keys if account_id is None or k.account_id == account_id]
        return found

    async def delete_shared_key(self, endpoint_name: str) -> bool:
        key = await self.get_shared_key(endpoint_name)
        if key is None:
            return False
        await self.redis.delete(self.keys.ep("psk", endpoint_name), self.keys.ep("psk_account", endpoint_name))
        await self.redis.srem(self.keys.bucket("psks", endpoint_name), endpoint_name)
        await self.redis.srem(self.keys.acc("psks", key.account_id), endpoint_name)
        return True

    async def put_trusted_ca(self, ca: TrustedCa) -> None:
        # the indexes first: an entry whose record is not (yet, or no longer) there is skipped by readers
        await self.redis.sadd(self.keys.bucket("cas", ca.id), ca.id)
        await self.redis.sadd(self.keys.acc("cas", ca.account_id), ca.id)
        await self.redis.set(self.keys.named("ca", ca.id), encode(ca))

    async def list_trusted_cas(self, account_id: str | None = None) -> list[TrustedCa]:
        indexes = self.keys.buckets("cas") if account_id is None else [self.keys.acc("cas", account_id)]
        ids = sorted(await self._members(indexes))
        return await self._blobs(TrustedCa, [self.keys.named("ca", i) for i in ids])

    async def delete_trusted_ca(self, ca_id: str) -> bool:
        ca = await self._blob(TrustedCa, self.keys.named("ca", ca_id))
        if ca is None:
            return False
        await self.redis.delete(self.keys.named("ca", ca_id))
        await self.redis.srem(self.keys.bucket("cas", ca_id), ca_id)
        await self.redis.srem(self.keys.acc("cas", ca.account_id), ca_id)
        return True
