"""Resource subscriptions and presubscriptions on Redis."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.model import PresubscriptionRule
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import SEP, encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisSubscriptions(RedisConnection):
    """`SubscriptionStore` on Redis."""

    # One set per device of `<key id><SEP><path>` (issue 31 #2: in the device's slot, so a Register drops them with
    # the rest of the device in one step); a key's subscriptions to a device are the members it starts.
    async def add_subscription(self, key_id: str, device_id: str, path: str) -> None:
        await self.redis.sadd(self.keys.dev("subscribers", device_id), f"{key_id}{SEP}{path}")

    async def remove_subscription(self, key_id: str, device_id: str, path: str) -> bool:
        return bool(await self.redis.srem(self.keys.dev("subscribers", device_id), f"{key_id}{SEP}{path}"))

    async def list_subscriptions(self, key_id: str, device_id: str) -> list[str]:
        return sorted(p for k, p in await self.subscribers(device_id) if k == key_id)

    async def remove_device_subscriptions(self, device_id: str, key_id: str | None = None) -> int:
        pairs = await self.subscribers(device_id)
        doomed = [f"{k}{SEP}{p}" for k, p in pairs if key_id is None or k == key_id]
        if not doomed:
            return 0
        return int(await self.redis.srem(self.keys.dev("subscribers", device_id), *doomed))

    async def subscribers(self, device_id: str) -> list[tuple[str, str]]:
        members = [text(m) for m in await self.redis.smembers(self.keys.dev("subscribers", device_id))]
        return sorted((m.partition(SEP)[0], m.partition(SEP)[2]) for m in members)

    async def set_presubscriptions(self, key_id: str, account_id: str, rules: Sequence[PresubscriptionRule]) -> None:
        # the account's index holds the key while it has rules: added before them, removed after them
        if rules:
            await self.redis.sadd(self.keys.acc("presub_keys", account_id), key_id)
            await self.redis.set(self.keys.key("presub", key_id), encode(list(rules)))
        else:
            await self.redis.delete(self.keys.key("presub", key_id))
            await self.redis.srem(self.keys.acc("presub_keys", account_id), key_id)

    async def get_presubscriptions(self, key_id: str) -> list[PresubscriptionRule]:
        data = await self.redis.get(self.keys.key("presub", key_id))
        return [] if data is None else decode(list[PresubscriptionRule], data)

    async def account_presubscriptions(self, account_id: str) -> list[tuple[str, list[PresubscriptionRule]]]:
        keys = sorted(text(k) for k in await self.redis.smembers(self.keys.acc("presub_keys", account_id)))
        result = []
        for key_id in keys:
            rules = await self.get_presubscriptions(key_id)
            if rules:
                result.append((key_id, rules))
        return result
