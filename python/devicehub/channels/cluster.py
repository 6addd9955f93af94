"""Redis mode: one key's channel is owned by one node at a time, and events reach it from every node.

Every node forwards the events it produces to the key's inbox in Redis (a list). The node that holds the key's
lease (where its WebSocket is connected, or that adopted its callback or pull channel) moves inbox events into
its local queue, writes them to the key's journal in Redis, and only then trims the inbox — so a node that dies
loses no queued event (delivery stays at least once). Ownership moves by a control message: the node taking over
asks the owner to release; the owner closes its socket with 1001, writes its journal and drops the lease.
A dead owner's lease runs out after `LEASE_TTL` seconds and the next node takes it. Control messages go on a sharded
pub/sub channel (SPUBLISH, Redis 7.0): on Redis Cluster only the shard of the channel's slot carries them, where
classic PUBLISH is broadcast to every node of the cluster (issue 31 #2).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from devicehub import tasks
from devicehub.domain.model import StoredEvent

log = logging.getLogger("devicehub.cluster")

LEASE_TTL = 5.0  # seconds a dead node keeps its channels before another node can take them
INBOX_MAX = 1_000_000  # events an unowned key can gather before the oldest go (the queue's byte cap comes after)
DRAIN_BATCH = 1000
LISTEN_POLL_S = 1.0  # the control listener reads with this time-out (below any Redis socket time-out)
ANSWER_KEPT_S = 30  # an answer nobody popped (its asker gave up) is dropped after this

_encode = msgspec.msgpack.Encoder().encode
_decode_event = msgspec.msgpack.Decoder(StoredEvent).decode

ControlHandler = Callable[[str, str, str], Awaitable[None]]  # (verb, key id, sender node)


class ClusterLink:
    """The Redis side of channel ownership: inboxes, leases and control messages between nodes."""

    def __init__(
        self,
        redis: aioredis.Redis | RedisCluster,
        shard: Callable[[str], aioredis.Redis],
        prefix: str,
        node_id: str,
    ) -> None:
        self._redis = redis
        self._shard = shard  # the server holding a name's slot (SharedStore.shard)
        self._prefix = prefix
        self.node_id = node_id
        self._listener: asyncio.Task[None] | None = None
        self._pubsub: Any = None

    def _inbox(self, key_id: str) -> str:
        return f"{self._prefix}inbox:{{key:{key_id}}}"  # the key's slot (store/redis/keys.py)

    @property
    def _control(self) -> str:
        return f"{self._prefix}control"

    # ---- inboxes ------------------------------------------------------------------------------
    async def forward(self, batches: dict[str, list[StoredEvent]]) -> None:
        """Append events to their keys' inboxes, in order, in one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for key_id, events in batches.items():
                pipe.rpush(self._inbox(key_id), *(_encode(e) for e in events))
                pipe.ltrim(self._inbox(key_id), -INBOX_MAX, -1)
            await pipe.execute()

    async def peek(self, key_ids: Sequence[str]) -> dict[str, list[StoredEvent]]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for key_id in key_ids:
                pipe.lrange(self._inbox(key_id), 0, DRAIN_BATCH - 1)
            replies = await pipe.execute()
        return {k: [_decode_event(d) for d in r] for k, r in zip(key_ids, replies, strict=True) if r}

    async def trim(self, counts: dict[str, int]) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for key_id, count in counts.items():
                pipe.ltrim(self._inbox(key_id), count, -1)
            await pipe.execute()

    async def drop_inbox(self, key_id: str) -> None:
        await self._redis.delete(self._inbox(key_id))

    # ---- control messages ---------------------------------------------------------------------
    async def send(self, verb: str, key_id: str) -> None:
        await self._shard(self._control).spublish(self._control, f"{verb} {key_id} {self.node_id}")

    # ---- questions to a key's owner: asked on the control channel, answered in a list ----------
    def _reply(self, key_id: str, question: str) -> str:
        return f"{self._prefix}reply:{{key:{key_id}}}:{question}"  # the key's slot: one shard pops it

    async def ask(self, verb: str, key_id: str, within: float) -> bytes | None:
        """Ask whichever node owns the key's channel; its answer (`answer`), or None if none came `within` seconds
        (no node owns it now, or the owner died)."""
        question = uuid.uuid4().hex
        await self.send(f"{verb}:{question}", key_id)
        reply = await self._shard(self._reply(key_id, question)).blpop([self._reply(key_id, question)], within)
        return None if reply is None else cast(bytes, reply[1])

    async def answer(self, key_id: str, question: str, data: bytes) -> None:
        reply = self._reply(key_id, question)
        async with self._shard(reply).pipeline(transaction=True) as pipe:
            pipe.rpush(reply, data)
            pipe.expire(reply, ANSWER_KEPT_S)  # an asker that gave up leaves nothing behind
            await pipe.execute()

    async def listen(self, handler: ControlHandler) -> None:
        self._pubsub = self._shard(self._control).pubsub(ignore_subscribe_messages=True)
        await self._pubsub.ssubscribe(self._control)
        self._listener = asyncio.create_task(self._listen(handler), name="cluster-control")

    async def _listen(self, handler: ControlHandler) -> None:
        # polled with a time-out, and kept through Redis failures: a read error is logged once and the next
        # read reconnects and subscribes again (a message published while Redis was away is lost; the leases
        # settle ownership without it)
        failing = False
        while True:
            try:
                message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=LISTEN_POLL_S)
            except (RedisConnectionError, RedisTimeoutError, OSError) as error:
                if not failing:
                    log.warning("control channel lost (%s); reconnecting", error)
                failing = True
                await asyncio.sleep(LISTEN_POLL_S / 2)
                continue
            if failing:
                log.info("control channel back")
                failing = False
            if message is None:
                continue
            data = message.get("data")
            text = data.decode() if isinstance(data, bytes) else str(data)
            verb, _, rest = text.partition(" ")
            key_id, _, sender = rest.partition(" ")
            if sender == self.node_id:
                continue
            try:
                await handler(verb, key_id, sender)
            except Exception:
                log.exception("control message %r failed", text)

    async def close(self) -> None:
        if self._listener is not None:
            await tasks.stop(self._listener)
        if self._pubsub is not None:
            await self._pubsub.aclose()
