"""Redis mode (issue 32 #2): an account's console feed sees the events of the devices every node holds, not only of
those held by the node serving the feed.

A node with a feed of account A open says so in a sorted set (`console:open`, member `<account> <node>`, score the
time it stops counting: OPEN_TTL_S after its last refresh, every REFRESH_S, so a dead node's claim runs out by
itself) and subscribes to A's sharded pub/sub channel (`console:{acc:A}`, SSUBSCRIBE: on Redis Cluster only A's
slot's shard carries it). Every node reads the set every CHECK_S into `open_accounts`; only for the accounts in it
does it publish the feed's events (the account's notifications, registrations, updates, de-registrations and
firmware-update events, and the async-responses to its keys, which carry the keys whose feeds show them: a request
taken by one node is answered by the node holding the device) to the account's channel, batched per loop turn, one
pipeline. With no console open anywhere the hot path pays one test of an empty set. A message carries its origin
node: a node does not take back its own events (its own feeds got them locally). Delivery is best-effort, as the
feed's own queue is: an event published while a subscriber reconnects is lost to that feed; an event published in the
CHECK_S after the first feed of an account opens may not be relayed yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from devicehub.domain.events import (
    AsyncResponseEvent,
    DeregistrationEvent,
    Event,
    FirmwareUpdateEvent,
    NotificationEvent,
    RegistrationEvent,
)
from devicehub.store.redis.codec import text

log = logging.getLogger("devicehub.console")

OPEN_TTL_S = 30.0  # a feed-holding node's claim lasts this long without a refresh (a dead node's runs out)
REFRESH_S = 10.0
CHECK_S = 2.0  # how stale a node's view of the accounts with an open feed may be
LISTEN_POLL_S = 1.0

_KINDS: dict[str, type[Any]] = {
    "n": NotificationEvent,
    "r": RegistrationEvent,
    "d": DeregistrationEvent,
    "f": FirmwareUpdateEvent,
    "a": AsyncResponseEvent,
}
_TAGS = {cls: tag for tag, cls in _KINDS.items()}
_encode = msgspec.msgpack.Encoder().encode


class _Message(msgspec.Struct, array_like=True, frozen=True):
    origin: str  # the node that published it
    tag: str  # the event's kind (_KINDS)
    body: bytes  # the event
    keys: tuple[str, ...] = ()  # an async-response's: the keys whose feeds show it (absent: the account's feeds)


_decode = msgspec.msgpack.Decoder(_Message).decode
_decoders = {tag: msgspec.msgpack.Decoder(cls) for tag, cls in _KINDS.items()}

# (account id, event, keys): to this node's taps of the account, those of `keys` only when it names some
Deliver = Callable[[str, Event, tuple[str, ...]], None]


class ConsoleRelay:
    """Each node's side of the cluster-wide console feed (see the module docstring)."""

    def __init__(self, shard: Callable[[str], aioredis.Redis], prefix: str, node_id: str, deliver: Deliver) -> None:
        self._shard = shard
        self._prefix = prefix
        self.node_id = node_id
        self._deliver = deliver
        self.open_accounts: frozenset[str] = frozenset()  # as of the last check, at most CHECK_S old
        self._held: dict[str, asyncio.Task[None]] = {}  # accounts with a feed open here → their listener
        self._outbox: dict[str, list[bytes]] = {}
        self._unclaims: set[asyncio.Future[None]] = set()
        self._flusher: asyncio.Task[None] | None = None
        self._loop: asyncio.Task[None] | None = None

    @property
    def _open_set(self) -> str:
        return f"{self._prefix}console:open"

    def _channel(self, account_id: str) -> str:
        return f"{self._prefix}console:{{acc:{account_id}}}"  # the account's slot (store/redis/keys.py)

    async def start(self) -> None:
        await self._check()
        self._loop = asyncio.create_task(self._keep(), name="console-relay")

    async def stop(self) -> None:
        tasks = [t for t in (self._loop, self._flusher, *self._held.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._held:
            with contextlib.suppress(RedisError, OSError):
                await self._shard(self._open_set).zrem(self._open_set, *(self._member(a) for a in self._held))
        self._held.clear()

    # ---- holding: this node has feeds of these accounts open ------------------------------------
    def _member(self, account_id: str) -> str:
        return f"{account_id} {self.node_id}"

    def hold(self, account_id: str) -> None:
        """The first feed of the account opened here: subscribe to its channel and claim it at once."""
        if account_id not in self._held:
            self._held[account_id] = asyncio.create_task(self._listen(account_id), name=f"console-{account_id}")

    def release(self, account_id: str) -> None:
        """The last feed of the account here closed."""
        task = self._held.pop(account_id, None)
        if task is not None:
            task.cancel()
            unclaim = asyncio.ensure_future(self._unclaim(account_id))
            self._unclaims.add(unclaim)
            unclaim.add_done_callback(self._unclaims.discard)

    async def _unclaim(self, account_id: str) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._shard(self._open_set).zrem(self._open_set, self._member(account_id))

    async def _claim(self, accounts: list[str]) -> None:
        if accounts:
            until = time.time() + OPEN_TTL_S
            await self._shard(self._open_set).zadd(self._open_set, {self._member(a): until for a in accounts})

    async def _check(self) -> None:
        now = time.time()
        client = self._shard(self._open_set)
        members = await client.zrangebyscore(self._open_set, now, "+inf")
        self.open_accounts = frozenset(text(m).partition(" ")[0] for m in members)

    async def _sweep(self) -> None:
        await self._shard(self._open_set).zremrangebyscore(self._open_set, "-inf", time.time())  # dead nodes' claims

    async def _keep(self) -> None:
        refreshed = 0.0
        failing = False
        while True:
            try:
                if time.monotonic() - refreshed >= REFRESH_S:
                    await self._claim(list(self._held))
                    await self._sweep()
                    refreshed = time.monotonic()
                await self._check()
                if failing:
                    log.info("console relay: Redis back")
                failing = False
            except (RedisError, OSError) as error:
                if not failing:
                    log.warning("console relay: Redis failed (%s); feeds see only this node's devices meanwhile", error)
                failing = True
            await asyncio.sleep(CHECK_S)

    async def _listen(self, account_id: str) -> None:
        channel = self._channel(account_id)
        while True:  # kept through Redis failures: a lost connection subscribes again
            pubsub: Any = self._shard(channel).pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.ssubscribe(channel)
                await self._claim([account_id])
                await self._check()  # this node publishes for the account from now on too
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=LISTEN_POLL_S)
                    if message is not None:
                        self._received(account_id, message.get("data"))
            except (RedisError, OSError) as error:
                log.info("console relay for %s lost (%s); subscribing again", account_id, error)
                await asyncio.sleep(CHECK_S)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def _received(self, account_id: str, data: object) -> None:
        if not isinstance(data, bytes):
            return
        try:
            message = _decode(data)
            if message.origin == self.node_id:
                return
            self._deliver(account_id, _decoders[message.tag].decode(message.body), message.keys)
        except (msgspec.DecodeError, KeyError):
            log.warning("console relay: an unreadable message on %s dropped", account_id)

    # ---- publishing ---------------------------------------------------------------------------------
    def publish(self, account_id: str, event: Event, keys: tuple[str, ...] = ()) -> None:
        """To the account's channel (the caller checked `open_accounts`); sent with the loop turn's others. `keys`:
        the keys an async-response is for (only their feeds show it)."""
        tag = _TAGS.get(type(event))
        if tag is None:
            return
        body = _encode(event)
        # without keys it keeps the previous release's three fields, which such a node reads (a rolling upgrade)
        message = (self.node_id, tag, body, keys) if keys else (self.node_id, tag, body)
        self._outbox.setdefault(account_id, []).append(_encode(message))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # the rest of this loop turn's events go in the same round trip
        outbox, self._outbox = self._outbox, {}
        try:
            for account_id, messages in outbox.items():
                channel = self._channel(account_id)
                async with self._shard(channel).pipeline(transaction=False) as pipe:
                    for message in messages:
                        pipe.spublish(channel, message)
                    await pipe.execute()
        except (RedisError, OSError) as error:
            log.info("console relay: %d account(s)' events not relayed (%s)", len(outbox), error)
