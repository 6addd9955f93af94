"""Resource subscriptions and presubscriptions on Redis."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.model import PresubscriptionRule
from devicehub.store.redis.codec import SEP, decode, encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisSubscriptions(RedisConnection):
    """`SubscriptionStore` on Redis."""

    async def add_subscription(self, key_id: str, device_id: str, path: str) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.sadd(self._k("subs", key_id, device_id), path)
            tx.sadd(self._k("subscribers", device_id), f"{key_id}{SEP}{path}")
            await tx.execute()

    async def remove_subscription(self, key_id: str, device_id: str, path: str) -> bool:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.srem(self._k("subs", key_id, device_id), path)
            tx.srem(self._k("subscribers", device_id), f"{key_id}{SEP}{path}")
            removed, _ = await tx.execute()
        return bool(removed)

    async def list_subscriptions(self, key_id: str, device_id: str) -> list[str]:
        return sorted(text(p) for p in await self.redis.smembers(self._k("subs", key_id, device_id)))

    async def remove_device_subscriptions(self, device_id: str, key_id: str | None = None) -> int:
        pairs = await self.subscribers(device_id)
        doomed = [(k, p) for k, p in pairs if key_id is None or k == key_id]
        if not doomed:
            return 0
        async with self.redis.pipeline(transaction=True) as tx:
            for k, p in doomed:
                tx.srem(self._k("subs", k, device_id), p)
                tx.srem(self._k("subscribers", device_id), f"{k}{SEP}{p}")
            await tx.execute()
        return len(doomed)

    async def subscribers(self, device_id: str) -> list[tuple[str, str]]:
        members = [text(m) for m in await self.redis.smembers(self._k("subscribers", device_id))]
        return sorted((m.partition(SEP)[0], m.partition(SEP)[2]) for m in members)

    async def set_presubscriptions(self, key_id: str, account_id: str, rules: Sequence[PresubscriptionRule]) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            if rules:
                tx.set(self._k("presub", key_id), encode(list(rules)))
                tx.sadd(self._k("presub_keys", account_id), key_id)
            else:
                tx.delete(self._k("presub", key_id))
                tx.srem(self._k("presub_keys", account_id), key_id)
            await tx.execute()

    async def get_presubscriptions(self, key_id: str) -> list[PresubscriptionRule]:
        data = await self.redis.get(self._k("presub", key_id))
        return [] if data is None else decode(list[PresubscriptionRule], data)

    async def account_presubscriptions(self, account_id: str) -> list[tuple[str, list[PresubscriptionRule]]]:
        keys = sorted(text(k) for k in await self.redis.smembers(self._k("presub_keys", account_id)))
        result = []
        for key_id in keys:
            rules = await self.get_presubscriptions(key_id)
            if rules:
                result.append((key_id, rules))
        return result
