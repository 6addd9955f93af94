"""Redis mode: which node owns each key's channel (leases), events forwarded to owners' inboxes (cluster.py).

The timers here stay on real time, as the journal flusher's do: they pace polling of Redis and wait for Redis
leases to run out, which are wall-clock facts shared with the other nodes, not rules of this node's clock.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterable

from devicehub import tasks
from devicehub.channels.channel import CALLBACK, WEBSOCKET, Channel
from devicehub.channels.cluster import LEASE_TTL, ClusterLink
from devicehub.channels.encode import EventEncoder
from devicehub.channels.journal import Journal
from devicehub.channels.lifecycle import ChannelLifecycle
from devicehub.channels.options import ChannelOptions
from devicehub.channels.registry import ChannelRegistry
from devicehub.channels.view import ChannelView, decode_view, encode_view, view_of
from devicehub.channels.websocket import GOING_AWAY
from devicehub.clock import Clock
from devicehub.domain.events import KIND_ASYNC_RESPONSE, Event
from devicehub.domain.model import ChannelConfig, StoredEvent
from devicehub.domain.storage.store import Store
from devicehub.errors import Unavailable
from devicehub.outages import OutageLog

log = logging.getLogger("devicehub.channels")

VIEW = "view"  # the control verb asking the owner for a channel's view (view.py)
VIEW_WAIT_S = 2.0  # an owner answers in a round trip or two; an operator's GET waits no longer than this
# a node taking a channel over asks its holder to release it this often while the lease stays taken (an owner answers
# in a round trip or two; a lease upkeep turn, LEASE_TTL / 3, can adopt the released channel before we take it)
RELEASE_ASK_S = 0.5


class ClusterOwnership:
    """The channels this node owns are in the registry; every channel of the cluster is in `_configs`, so events
    for channels owned elsewhere can be encoded and forwarded."""

    def __init__(
        self,
        cluster: ClusterLink,
        store: Store,
        clock: Clock,
        registry: ChannelRegistry,
        lifecycle: ChannelLifecycle,
        journal: Journal,
        encoder: EventEncoder,
        uid_source: Callable[[], str],
    ) -> None:
        self.cluster = cluster
        self._store = store
        self._clock = clock
        self._registry = registry
        self._lifecycle = lifecycle
        self._journal = journal
        self._encoder = encoder
        self._uid_source = uid_source
        self._configs: dict[str, tuple[ChannelConfig, ChannelOptions]] = {}
        self._accounts: dict[str, set[str]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        # each Redis task says an outage once, then once a minute, then that it works again (outages.OutageLog)
        self._outages = {
            task: OutageLog(log, task, time.monotonic)
            for task in ("forwarding events to Redis", "draining channel inboxes", "lease upkeep")
        }
        self._adopting: dict[str, asyncio.Lock] = {}
        self._outbox: dict[str, list[StoredEvent]] = {}
        self._outbox_waiters: list[asyncio.Future[None]] = []  # publishers waiting for the outbox to be in Redis
        self._forwarder: asyncio.Task[None] | None = None
        self._origin_prefix = uuid.uuid4().hex[:12] + "."  # this process's events: unique across restarts
        self._origin_seq = itertools.count()

    async def start(self) -> None:
        await self._refresh_configs()
        await self.cluster.listen(self._on_control)
        self._tasks = [
            asyncio.create_task(self._drain_forever(), name="cluster-drain"),
            asyncio.create_task(self._hold_forever(), name="cluster-leases"),
        ]

    async def stop_tasks(self) -> None:
        """Stop draining and lease upkeep, and wait for the forwarder: nothing published is left behind."""
        await tasks.stop(*self._tasks)
        if self._forwarder is not None:
            await asyncio.gather(self._forwarder, return_exceptions=True)

    async def close(self) -> None:
        """Give up this node's leases (its channels' transports are stopped) and the control channel."""
        for key_id in self._registry.keys():
            await self._store.release_lease(_lease(key_id), self.cluster.node_id)
        await self.cluster.close()

    def account_keys(self, account_id: str) -> Iterable[str]:
        return self._accounts.get(account_id, ())

    def knows(self, key_id: str) -> bool:
        """Whether this node has `key_id`'s channel configuration, so its events are forwarded to the channel's
        owner (asked through the hub by whoever must know that a channel set up on another node is routed here)."""
        return key_id in self._configs

    # ---- events: forwarded to inboxes --------------------------------------------------------------
    async def forward(self, key_ids: Iterable[str], event: Event) -> None:
        """Every event goes to its keys' inboxes; each key's owner moves it into its queue."""
        now_ms = int(self._clock.now() * 1000)
        uid: str | None = None
        encoded: dict[tuple[bool, ...], bytes] = {}
        for key_id in key_ids:
            entry = self._configs.get(key_id)
            if entry is None:
                continue
            options = entry[1]
            if not options.carries(event.kind):
                continue
            data = encoded.get(options.encoding)
            if data is None:
                if uid is None and options.include_uid:
                    uid = self._uid_source()
                data = encoded[options.encoding] = self._encoder.encode(event, options, now_ms, uid)
            device = getattr(event, "device_id", "")  # issue 34 #2: the owner gives per-device sequences
            # issue 34 #1: an inbox event the owner journaled but did not trim before it died is drained again by
            # the next owner; its id tells the cursor channel it has it already (it would get a second cursor)
            origin = f"{self._origin_prefix}{next(self._origin_seq)}" if options.include_cursor else ""
            self._outbox.setdefault(key_id, []).append(StoredEvent(event.kind, data, now_ms, device, origin))
        if not self._outbox:
            return
        if self._forwarder is None or self._forwarder.done():
            self._forwarder = asyncio.create_task(self._forward_outbox(), name="cluster-forward")
        if event.kind == KIND_ASYNC_RESPONSE:
            # issue 31 #4: the answer to a device request is the last trace of it (the request leaves the store
            # after this returns): it is in its key's inbox in Redis before this returns, so a node killed now
            # leaves either the answer or the queued request (delivered again by the device's next node), never
            # neither. Notifications do not wait: the device's ACK has gone already, as on one node.
            forwarded = asyncio.get_running_loop().create_future()
            self._outbox_waiters.append(forwarded)
            await asyncio.shield(forwarded)

    async def _forward_outbox(self) -> None:
        """One writer sends what queued up meanwhile in one round trip, so order holds and Redis is not
        asked once per event (a stop waits for it: nothing published is left behind)."""
        while self._outbox:
            batches, self._outbox = self._outbox, {}
            waiters, self._outbox_waiters = self._outbox_waiters, []
            try:
                await self.cluster.forward(batches)
            except Exception as error:
                _raise_if_cancelled(error)
                self._outages["forwarding events to Redis"].failed(error)
                for key_id, events in batches.items():  # put them back ahead of newer ones
                    self._outbox[key_id] = events + self._outbox.get(key_id, [])
                self._outbox_waiters[:0] = waiters
                await asyncio.sleep(0.1)
            else:
                self._outages["forwarding events to Redis"].worked()
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    # ---- ownership (lifecycle.Ownership) ------------------------------------------------------------
    async def changed(self, key_id: str, verb: str = "changed") -> None:
        await self._refresh_configs()
        await self.cluster.send(verb, key_id)

    async def drop_inbox(self, key_id: str) -> None:
        await self.cluster.drop_inbox(key_id)

    async def own(self, key_id: str, *, take_over: bool) -> Channel | None:
        """Become the owner of the key's channel (lease, journal, queue); None when it has none or is taken."""
        lock = self._adopting.setdefault(key_id, asyncio.Lock())
        async with lock:
            channel = self._registry.get(key_id)
            if channel is not None:
                return channel
            loop = asyncio.get_running_loop()
            deadline = loop.time() + LEASE_TTL + 2
            ask_at = loop.time()
            while not await self._store.acquire_lease(_lease(key_id), self.cluster.node_id, LEASE_TTL, time.time()):
                if not take_over:
                    return None
                if loop.time() >= ask_at:
                    # asked again while the lease stays taken: the owner that released it may not be the one holding
                    # it now (another node's lease upkeep, or the old owner's, adopts an ownerless channel between
                    # our polls) and that one was never asked; asked once, the socket failed with CHANNEL_BUSY
                    await self.cluster.send("release", key_id)
                    ask_at = loop.time() + RELEASE_ASK_S
                if loop.time() > deadline:
                    raise Unavailable("the channel's owner node did not hand it over", token="CHANNEL_BUSY")
                await asyncio.sleep(0.05)  # the owner answers by releasing, or its lease runs out
            config = await self._store.get_channel(key_id)
            if config is None:
                await self._store.release_lease(_lease(key_id), self.cluster.node_id)
                return None
            # not under the lifecycle lock: callers installing a channel hold it; the per-key lock keeps adoption
            # single
            channel = self._lifecycle.add(config, self._clock.now())
            channel.restore(await self._journal.load(key_id), await self._journal.load_drops(key_id))
            if channel.kind == WEBSOCKET:
                channel.disconnected_since = self._clock.now()
            log.info("node %s owns the channel of key %s", self.cluster.node_id, key_id)
            return channel

    async def _refresh_configs(self) -> None:
        configs = await self._store.list_channels()
        self._configs = {c.key_id: (c, ChannelOptions.from_stored(c.serialization)) for c in configs}
        accounts: dict[str, set[str]] = {}
        for config in configs:
            accounts.setdefault(config.account_id, set()).add(config.key_id)
        self._accounts = accounts

    async def ask_view(self, key_id: str) -> ChannelView | None:
        """The key's channel as its owner sees it (view.py), asked of the owner; None when the cluster has no channel
        for the key, or no owner answered within VIEW_WAIT_S (a dead owner's lease not yet run out)."""
        if key_id not in self._configs:
            await self._refresh_configs()  # set up on another node a moment ago
            if key_id not in self._configs:
                return None
        data = await self.cluster.ask(VIEW, key_id, VIEW_WAIT_S)
        return None if data is None else decode_view(data)

    async def _on_control(self, verb: str, key_id: str, sender: str) -> None:
        if verb.startswith(VIEW + ":"):
            channel = self._registry.get(key_id)
            if channel is not None:  # only the owner answers
                view = encode_view(view_of(channel, self._clock.now()))
                await self.cluster.answer(key_id, verb.partition(":")[2], view)
            return
        if verb in ("changed", "deleted"):
            await self._refresh_configs()
        channel = self._registry.get(key_id)
        if channel is None:
            return
        async with self._lifecycle.lock:
            if self._registry.get(key_id) is not channel:
                return
            if verb == "deleted":
                await self._lifecycle.remove_locked(channel, f"deleted on node {sender}", GOING_AWAY, "channel deleted")
            elif verb == "release":
                await self._release_locked(channel, "another socket opened for this key")
            elif verb == "changed":
                entry = self._configs.get(key_id)
                if entry is not None and entry[0] != channel.config:
                    await self._release_locked(channel, "channel replaced")

    async def _release_locked(self, channel: Channel, reason: str) -> None:
        """Hand the channel to another node: close the socket 1001, write the journal, drop the lease."""
        await self._lifecycle.stop_transport(channel, GOING_AWAY, reason)
        self._registry.discard(channel)
        channel.close()
        await self._journal.release(channel.key_id)
        await self._store.release_lease(_lease(channel.key_id), self.cluster.node_id)
        log.info("channel of key %s handed over (%s)", channel.key_id, reason)

    async def _drain_forever(self) -> None:
        # this bounds how long an event waits in Redis before its owner queues it
        while True:
            await asyncio.sleep(0.02)
            try:
                await self._drain_once()
            except Exception as error:
                _raise_if_cancelled(error)
                self._outages["draining channel inboxes"].failed(error)
            else:
                self._outages["draining channel inboxes"].worked()

    async def _drain_once(self) -> None:
        """Inbox → local queue → journal in Redis, and only then trim the inbox: a crash loses nothing."""
        if not len(self._registry):
            return
        found = await self.cluster.peek(self._registry.keys())
        taken: dict[str, int] = {}
        for key_id, events in found.items():
            channel = self._registry.get(key_id)
            if channel is None:
                continue  # handed over meanwhile: the events stay for the next owner
            for event in events:
                channel.push(event.kind, event.data, event.queued_at_ms, event.device, event.origin)
            taken[key_id] = len(events)
        if taken:
            await self._journal.flush()
            await self.cluster.trim(taken)

    async def _hold_forever(self) -> None:
        """Renew this node's leases; adopt channels nobody owns (a dead node's, or ones set up meanwhile)."""
        while True:
            await asyncio.sleep(LEASE_TTL / 3)
            try:
                for key_id in self._registry.keys():
                    if not await self._store.acquire_lease(
                        _lease(key_id), self.cluster.node_id, LEASE_TTL, time.time()
                    ):
                        log.warning("lost the lease of key %s to another node", key_id)
                        channel = self._registry.get(key_id)
                        if channel is not None:
                            async with self._lifecycle.lock:
                                await self._release_locked(channel, "owned by another node")
                await self._refresh_configs()
                # every channel has an owner: it queues under the byte cap, and its time rules run once (spec §8)
                for key_id in list(self._configs):
                    if key_id not in self._registry:
                        channel = await self.own(key_id, take_over=False)
                        if channel is not None and channel.kind == CALLBACK:
                            self._lifecycle.start_deliverer(channel)
            except Exception as error:
                _raise_if_cancelled(error)
                self._outages["lease upkeep"].failed(error)
            else:
                self._outages["lease upkeep"].worked()


def _lease(key_id: str) -> str:
    return f"channel:{key_id}"


def _raise_if_cancelled(error: Exception) -> None:
    """A stop cancels these loops; redis-py may turn the cancel of a command under way into a ConnectionError, which
    the loop would take for an outage and go on (and the stop would wait for it forever)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from error
