"""Redis mode: API-key revocations announced to every node over pub/sub, so each node's key cache drops the key.

`RedisStore.revoke_key` publishes the key id on `channel(prefix)` once the revocation is stored; each node runs
one `RevocationListener` that hands the id to its key cache. The channel is a sharded one (SPUBLISH/SSUBSCRIBE,
Redis 7.0): on Redis Cluster a message goes to the shard of the channel's slot only, not to every node of the cluster
as PUBLISH does; `shard(name)` is the client of the server holding that slot (the one Redis otherwise).
A dropped subscription may have missed announcements: the listener then asks for the whole cache to be dropped
and subscribes again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from devicehub import tasks

log = logging.getLogger("devicehub.store")

RESUBSCRIBE_S = 1.0
POLL_S = 1.0  # below the Redis socket time-out
SUBSCRIBE_WAIT_S = 10.0


Shard = Callable[[str], aioredis.Redis]  # RedisStore.shard


def channel(prefix: str) -> str:
    return f"{prefix}keys-revoked"


async def announce(shard: Shard, prefix: str, key_id: str) -> None:
    name = channel(prefix)
    await shard(name).spublish(name, key_id)


class RevocationListener:
    """Calls `on_revoked(key_id)` for every key revoked on any node; `on_gap()` when announcements may be lost."""

    def __init__(
        self, shard: Shard, prefix: str, on_revoked: Callable[[str], None], on_gap: Callable[[], None]
    ) -> None:
        self._shard = shard
        self._channel = channel(prefix)
        self._on_revoked = on_revoked
        self._on_gap = on_gap
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self.subscriptions = 0  # how often it subscribed: more than once means announcements may have been missed

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="key-revocations")
        try:  # from here on no revocation goes unheard
            await asyncio.wait_for(self._subscribed.wait(), SUBSCRIBE_WAIT_S)
        except TimeoutError:  # keys then stay cached for the TTL at most; the listener keeps trying
            log.warning("key revocation channel not subscribed after %.0f s", SUBSCRIBE_WAIT_S)

    async def _run(self) -> None:
        while True:
            pubsub: Any = self._shard(self._channel).pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.ssubscribe(self._channel)
                self.subscriptions += 1
                self._on_gap()  # whatever was cached before this subscription may have been revoked since
                self._subscribed.set()
                while True:
                    # polled with a time-out: an idle blocking read would hit the connection's socket time-out
                    # (--redis-timeout) and drop the subscription every few seconds, leaving gaps
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=POLL_S)
                    if message is None:
                        continue
                    data = message.get("data")
                    self._on_revoked(data.decode() if isinstance(data, bytes) else str(data))
            except (RedisError, OSError) as error:
                log.warning("key revocation channel lost (%s); subscribing again", error)
                self._on_gap()
            finally:
                await pubsub.aclose()
            await asyncio.sleep(RESUBSCRIBE_S)

    async def close(self) -> None:
        if self._task is not None:
            await tasks.stop(self._task)
