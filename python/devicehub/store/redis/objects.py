"""Account-owned LwM2M object definitions on Redis: one hash per account (field: the object id), so that every
call touches one key."""

from __future__ import annotations

from devicehub.domain.object_model import AccountObject
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import encode
from devicehub.store.redis.connection import RedisConnection


class RedisAccountObjects(RedisConnection):
    """`AccountObjectStore` on Redis."""

    async def put_account_object(self, stored: AccountObject, *, replace: bool) -> bool:
        key = self.keys.acc("lwm2m_objects", stored.account_id)
        field = str(stored.definition.id)
        if replace:
            await self.redis.hset(key, field, encode(stored))
            return True
        return bool(await self.redis.hsetnx(key, field, encode(stored)))

    async def get_account_object(self, account_id: str, object_id: int) -> AccountObject | None:
        data = await self.redis.hget(self.keys.acc("lwm2m_objects", account_id), str(object_id))
        return None if data is None else decode(AccountObject, data)

    async def list_account_objects(self, account_id: str) -> list[AccountObject]:
        stored = [
            decode(AccountObject, v)
            for v in (await self.redis.hgetall(self.keys.acc("lwm2m_objects", account_id))).values()
        ]
        return sorted(stored, key=lambda s: s.definition.id)

    async def delete_account_object(self, account_id: str, object_id: int) -> bool:
        return bool(await self.redis.hdel(self.keys.acc("lwm2m_objects", account_id), str(object_id)))
