"""Notification channels and their event journals on Redis."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.model import ChannelConfig, ChannelDrops, StoredEvent
from devicehub.store.redis.codec import decode, encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisChannels(RedisConnection):
    """`ChannelStore` on Redis."""

    async def put_channel(self, channel: ChannelConfig) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("channel", channel.key_id), encode(channel))
            tx.sadd(self._k("channels"), channel.key_id)
            tx.sadd(self._k("channels", channel.account_id), channel.key_id)
            await tx.execute()

    async def get_channel(self, key_id: str) -> ChannelConfig | None:
        return await self._blob(ChannelConfig, self._k("channel", key_id))

    async def delete_channel(self, key_id: str) -> bool:
        channel = await self.get_channel(key_id)
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("channel", key_id), self._k("events", key_id), self._k("drops", key_id))
            tx.srem(self._k("channels"), key_id)
            if channel is not None:
                tx.srem(self._k("channels", channel.account_id), key_id)
            await tx.execute()
        return channel is not None

    async def list_channels(self, account_id: str | None = None) -> list[ChannelConfig]:
        index = self._k("channels") if account_id is None else self._k("channels", account_id)
        keys = sorted(text(k) for k in await self.redis.smembers(index))
        return await self._blobs(ChannelConfig, [self._k("channel", k) for k in keys])

    async def add_channel_drops(self, key_id: str, drops: ChannelDrops) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            for field, count in (
                ("overflow", drops.overflow),
                ("expired", drops.expired),
                ("failed", drops.failed),
                ("delivered", drops.delivered),
            ):
                if count:
                    tx.hincrby(self._k("drops", key_id), field, count)
            await tx.execute()

    async def get_channel_drops(self, key_id: str) -> ChannelDrops:
        counts = {text(k): int(v) for k, v in (await self.redis.hgetall(self._k("drops", key_id))).items()}
        return ChannelDrops(
            counts.get("overflow", 0), counts.get("expired", 0), counts.get("failed", 0), counts.get("delivered", 0)
        )

    async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None:
        if events:
            await self.redis.rpush(self._k("events", key_id), *(encode(e) for e in events))

    async def load_events(self, key_id: str) -> list[StoredEvent]:
        return [decode(StoredEvent, data) for data in await self.redis.lrange(self._k("events", key_id), 0, -1)]

    async def drop_head_events(self, key_id: str, count: int) -> None:
        if count > 0:
            await self.redis.ltrim(self._k("events", key_id), count, -1)
