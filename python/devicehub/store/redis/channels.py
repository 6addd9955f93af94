"""Notification channels and their event journals on Redis."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.model import ChannelConfig, ChannelDrops, StoredEvent
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisChannels(RedisConnection):
    """`ChannelStore` on Redis."""

    async def put_channel(self, channel: ChannelConfig) -> None:
        # the indexes first: readers skip an entry whose record is not (yet, or no longer) there
        await self.redis.sadd(self.keys.bucket("channels", channel.key_id), channel.key_id)
        await self.redis.sadd(self.keys.acc("channels", channel.account_id), channel.key_id)
        await self.redis.set(self.keys.key("channel", channel.key_id), encode(channel))

    async def get_channel(self, key_id: str) -> ChannelConfig | None:
        return await self._blob(ChannelConfig, self.keys.key("channel", key_id))

    async def delete_channel(self, key_id: str) -> bool:
        channel = await self.get_channel(key_id)
        k = self.keys
        async with self._multi(k.key("channel", key_id)) as tx:  # the key's slot: the channel and its journal
            tx.delete(k.key("channel", key_id), k.key("events", key_id), k.key("drops", key_id))
            await tx.execute()
        await self.redis.srem(k.bucket("channels", key_id), key_id)
        if channel is not None:
            await self.redis.srem(k.acc("channels", channel.account_id), key_id)
        return channel is not None

    async def list_channels(self, account_id: str | None = None) -> list[ChannelConfig]:
        indexes = self.keys.buckets("channels") if account_id is None else [self.keys.acc("channels", account_id)]
        keys = sorted(await self._members(indexes))
        return await self._blobs(ChannelConfig, [self.keys.key("channel", k) for k in keys])

    async def add_channel_drops(self, key_id: str, drops: ChannelDrops) -> None:
        async with self._multi(self.keys.key("drops", key_id)) as tx:
            for field, count in (
                ("overflow", drops.overflow),
                ("expired", drops.expired),
                ("failed", drops.failed),
                ("delivered", drops.delivered),
            ):
                if count:
                    tx.hincrby(self.keys.key("drops", key_id), field, count)
            await tx.execute()

    async def get_channel_drops(self, key_id: str) -> ChannelDrops:
        counts = {text(k): int(v) for k, v in (await self.redis.hgetall(self.keys.key("drops", key_id))).items()}
        return ChannelDrops(
            counts.get("overflow", 0), counts.get("expired", 0), counts.get("failed", 0), counts.get("delivered", 0)
        )

    async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None:
        if events:
            await self.redis.rpush(self.keys.key("events", key_id), *(encode(e) for e in events))

    async def load_events(self, key_id: str) -> list[StoredEvent]:
        return [decode(StoredEvent, data) for data in await self.redis.lrange(self.keys.key("events", key_id), 0, -1)]

    async def drop_head_events(self, key_id: str, count: int) -> None:
        if count > 0:
            await self.redis.ltrim(self.keys.key("events", key_id), count, -1)
