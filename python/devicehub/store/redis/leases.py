"""Named leases on Redis: the domain's rule (domain/storage/leases.py) decided between a WATCH and its MULTI, so
another node's change in between makes the step read and decide again."""

from __future__ import annotations

from redis.asyncio.client import Pipeline

from devicehub.domain.storage.leases import Lease, may_release, may_take
from devicehub.store.redis.codec import text
from devicehub.store.redis.connection import RedisConnection


class RedisLeases(RedisConnection):
    """`LeaseStore` on Redis: one hash per lease (`owner`, `expires_at`)."""

    async def _held(self, tx: Pipeline, key: str) -> Lease | None:
        owner, expires_at = await tx.hmget(key, ["owner", "expires_at"])
        return None if owner is None else Lease(owner=text(owner), expires_at=float(expires_at or 0))

    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        key = self.keys.named("lease", name)
        taken = False

        async def read(tx: Pipeline) -> Lease | None:
            return await self._held(tx, key)

        def write(tx: Pipeline, held: Lease | None) -> None:
            nonlocal taken
            taken = may_take(held, owner, now)
            if taken:
                tx.hset(key, mapping={"owner": owner, "expires_at": repr(now + ttl_seconds)})

        await self._transact([key], read, write)
        return taken

    async def release_lease(self, name: str, owner: str) -> None:
        key = self.keys.named("lease", name)

        async def read(tx: Pipeline) -> Lease | None:
            return await self._held(tx, key)

        def write(tx: Pipeline, held: Lease | None) -> None:
            if may_release(held, owner):
                tx.delete(key)

        await self._transact([key], read, write)
