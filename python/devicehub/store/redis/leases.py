"""Named leases on Redis (Lua scripts, atomic across nodes)."""

from __future__ import annotations

from devicehub.store.redis.connection import RedisConnection


class RedisLeases(RedisConnection):
    """`LeaseStore` on Redis."""

    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        result = await self._acquire(keys=[self._k("lease", name)], args=[owner, repr(now), repr(now + ttl_seconds)])
        return bool(result)

    async def release_lease(self, name: str, owner: str) -> None:
        await self._release(keys=[self._k("lease", name)], args=[owner])
