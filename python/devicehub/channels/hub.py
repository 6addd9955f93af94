"""The channel hub: one channel per API key (spec §2.5), events in, batches out by callback, WebSocket or pull."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence

from aiohttp import web

from devicehub._core import DEFAULT_MAX_BYTES
from devicehub.channels import callback
from devicehub.channels.callback import CallbackClient, CallbackTarget
from devicehub.channels.channel import CALLBACK, PULL, WEBSOCKET, Channel, Counters
from devicehub.channels.cluster import LEASE_TTL, ClusterLink
from devicehub.channels.encode import EventEncoder
from devicehub.channels.journal import Journal
from devicehub.channels.options import ChannelOptions
from devicehub.channels.targets import TargetPolicy
from devicehub.channels.websocket import COALESCE_S, GOING_AWAY, UNEXPECTED, WebSocketSession
from devicehub.clock import Clock
from devicehub.config import ServeSettings
from devicehub.domain.accounts import Principal
from devicehub.domain.events import Event
from devicehub.domain.model import ChannelConfig, StoredEvent
from devicehub.domain.storage.store import Store
from devicehub.errors import BadRequest, Conflict, Gone, Unavailable
from devicehub.store.failures import unreachable

log = logging.getLogger("devicehub.channels")

IDLE_TIMEOUT_S = 48 * 3600.0  # spec §3.3, §8: no data for 48 hours → removed
DISCONNECTED_TIMEOUT_S = 24 * 3600.0  # spec §3.3: a closed WebSocket not reconnected within 24 hours → removed
INACTIVITY_TIMEOUT_S = 24 * 3600.0  # spec §8: the server closes a socket inactive for 24 hours
UNPOLLED_TIMEOUT_S = 600.0  # wire-format.md: a pull channel not polled for 10 min is removed

Send = Callable[[bytes], Awaitable[None]]


class ChannelHub:
    """Every channel of this node: their queues, their deliverers, the sweeper and the journal flusher."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        settings: ServeSettings,
        *,
        ping_payload: Callable[[], bytes] = lambda: os.urandom(4),
        ping_interval: float = 30.0,
        pong_timeout: float = 5.0,
        websocket_coalesce: float = COALESCE_S,
        pull_timeout: float = 30.0,
        pull_gone_s: float = 60.0,
        callback_timeout: float = callback.REQUEST_TIMEOUT_S,
        sweep_interval: float = 60.0,
        queue_max_bytes: int = DEFAULT_MAX_BYTES,
        uid_source: Callable[[], str] = lambda: str(uuid.uuid4()),
        cluster: ClusterLink | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._settings = settings
        self._ping_payload = ping_payload
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self._websocket_coalesce = websocket_coalesce
        self._pull_timeout = pull_timeout
        self._pull_gone_s = pull_gone_s
        self._callback_timeout = callback_timeout
        self._sweep_interval = sweep_interval
        self._queue_max_bytes = queue_max_bytes
        self._uid_source = uid_source
        self._channels: dict[str, Channel] = {}
        self._by_account: dict[str, set[str]] = {}
        self._pull_gone: dict[str, float] = {}  # key → until when GET pull answers 410
        self._counters = Counters()
        self._encoder = EventEncoder()
        self._journal = Journal(store, settings.flush_interval_ms / 1000)
        self._client: CallbackClient | None = None
        self._lock = asyncio.Lock()  # channel creation, replacement and removal happen one at a time
        self._sweeper: asyncio.Task[None] | None = None
        # Redis mode (cluster.py): the channels this node owns are in _channels; every channel of the cluster
        # is in _configs, so events for channels owned elsewhere can be encoded and forwarded
        self._cluster = cluster
        self._configs: dict[str, tuple[ChannelConfig, ChannelOptions]] = {}
        self._cluster_accounts: dict[str, set[str]] = {}
        self._cluster_tasks: list[asyncio.Task[None]] = []
        self._failing: set[str] = set()  # Redis tasks failing now (logged once per outage)
        self._adopting: dict[str, asyncio.Lock] = {}
        self._outbox: dict[str, list[StoredEvent]] = {}
        self._forwarder: asyncio.Task[None] | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load channels and their journaled events, then start deliverers, the sweeper and the flusher."""
        policy = TargetPolicy.from_settings(self._settings.callback_allow, dev=self._settings.dev)
        self._client = CallbackClient(self._clock, callback.tls_context(self._settings), self._callback_timeout, policy)
        await self._client.start()
        now = self._clock.now()
        if self._cluster is not None:
            await self._refresh_configs()
            await self._cluster.listen(self._on_control)
            self._cluster_tasks = [
                asyncio.create_task(self._drain_forever(), name="cluster-drain"),
                asyncio.create_task(self._hold_forever(), name="cluster-leases"),
            ]
        for config in await self._store.list_channels() if self._cluster is None else []:
            channel = self._add(config, now)
            channel.restore(await self._journal.load(config.key_id), await self._journal.load_drops(config.key_id))
            if channel.kind == CALLBACK:
                self._start_deliverer(channel)
            elif channel.kind == WEBSOCKET:
                channel.disconnected_since = now  # its socket, if any, closed when the previous process stopped
        self._journal.start()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="channel-sweeper")
        log.info("channel hub started with %d channels", len(self._channels))

    async def stop(self) -> None:
        """Close sockets with 1001, stop deliverers and write the journal (a graceful stop loses nothing)."""
        if self._client is None:
            return  # not started, or stopped already
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        for task in self._cluster_tasks:
            task.cancel()
        await asyncio.gather(*self._cluster_tasks, return_exceptions=True)
        if self._forwarder is not None:
            await asyncio.gather(self._forwarder, return_exceptions=True)
        await self.release_clients()
        for channel in list(self._channels.values()):
            await self._stop_transport(channel, GOING_AWAY, "server shutting down")
        await self._journal.stop()
        if self._cluster is not None:
            for key_id in list(self._channels):
                await self._store.release_lease(_lease(key_id), self._cluster.node_id)
            await self._cluster.close()
        await self._client.close()
        self._client = None

    async def release_clients(self) -> None:
        """Close every open WebSocket with 1001 (spec §7: server shutting down) and answer waiting polls 204."""
        sessions = [c.session for c in self._channels.values() if c.session is not None]
        await asyncio.gather(*(s.close(GOING_AWAY, "server shutting down") for s in sessions))
        for channel in self._channels.values():
            if channel.polling:
                channel.interrupt()

    # ---- events in -----------------------------------------------------------------------------------
    async def publish(self, key_ids: Sequence[str], event: Event) -> None:
        """Notifications and async-responses: to those keys' channels (no channel: not stored)."""
        await self.publish_many(((key_ids, event),))

    async def publish_many(self, events: Sequence[tuple[Sequence[str], Event]]) -> None:
        """`publish` for each (keys, event) in order, with one clock reading (a loop turn's notifications)."""
        if self._cluster is not None:
            for key_ids, event in events:
                await self._forward(key_ids, event)
            return
        channels = self._channels
        now_ms = int(self._clock.now() * 1000)
        for key_ids, event in events:
            self._push([c for k in key_ids if (c := channels.get(k)) is not None], event, now_ms)

    async def publish_account(self, account_id: str, event: Event) -> None:
        """Lifecycle events: to every channel of the account (architecture.md "Event routing rules")."""
        if self._cluster is not None:
            await self._forward(list(self._cluster_accounts.get(account_id, ())), event)
            return
        now_ms = int(self._clock.now() * 1000)
        self._push((self._channels[k] for k in self._by_account.get(account_id, ())), event, now_ms)

    async def _forward(self, key_ids: Iterable[str], event: Event) -> None:
        """Redis mode: every event goes to its keys' inboxes; each key's owner moves it into its queue."""
        assert self._cluster is not None
        now_ms = int(self._clock.now() * 1000)
        uid: str | None = None
        encoded: dict[tuple[bool, ...], bytes] = {}
        for key_id in key_ids:
            entry = self._configs.get(key_id)
            if entry is None:
                continue
            options = entry[1]
            data = encoded.get(options.encoding)
            if data is None:
                if uid is None and options.include_uid:
                    uid = self._uid_source()
                data = encoded[options.encoding] = self._encoder.encode(event, options, now_ms, uid)
            self._outbox.setdefault(key_id, []).append(StoredEvent(event.kind, data, now_ms))
        if self._outbox and (self._forwarder is None or self._forwarder.done()):
            self._forwarder = asyncio.create_task(self._forward_outbox(), name="cluster-forward")

    async def _forward_outbox(self) -> None:
        """One writer sends what queued up meanwhile in one round trip, so order holds and Redis is not
        asked once per event (a stop waits for it: nothing published is left behind)."""
        assert self._cluster is not None
        while self._outbox:
            batches, self._outbox = self._outbox, {}
            try:
                await self._cluster.forward(batches)
            except Exception as error:
                self._outage("forwarding events to Redis", error)
                for key_id, events in batches.items():  # put them back ahead of newer ones
                    self._outbox[key_id] = events + self._outbox.get(key_id, [])
                await asyncio.sleep(0.1)
            else:
                self._recovered("forwarding events to Redis")

    def _push(self, channels: Iterable[Channel], event: Event, now_ms: int) -> None:
        uid: str | None = None  # one identity for every channel of this event, made only if one shows it
        encoded: dict[tuple[bool, ...], bytes] = {}  # channels with equal options share one encoding
        kind = event.kind
        for channel in channels:
            options = channel.options.encoding
            data = encoded.get(options)
            if data is None:
                if uid is None and channel.options.include_uid:
                    uid = self._uid_source()
                data = encoded[options] = self._encoder.encode(event, channel.options, now_ms, uid)
            channel.push(kind, data, now_ms)

    # ---- channel administration ------------------------------------------------------------------
    @property
    def callback_client(self) -> CallbackClient | None:
        """The HTTP client of every callback channel (after start), for hooks such as callback latency."""
        return self._client

    def largest_queues(self, count: int) -> list[Channel]:
        """This node's `count` channels holding the most queued bytes, largest first."""
        return sorted(self._channels.values(), key=lambda c: c.queue.bytes_used, reverse=True)[:count]

    @property
    def counters(self) -> Counters:
        """Hub-wide counters, and the hook that observes deliveries (metrics)."""
        return self._counters

    def channel(self, key_id: str) -> Channel | None:
        return self._channels.get(key_id)

    async def set_callback(self, caller: Principal, target: CallbackTarget) -> None:
        """spec §4.5: verify the URL with a PUT answered 200, then store it (replacing the key's channel)."""
        assert self._client is not None, "ChannelHub.start() first"
        await self._client.verify(target.url, target.headers, caller.key_id)
        config = self._config(caller, CALLBACK, target.options, url=target.url, headers=target.headers)
        async with self._lock:
            channel = await self._install(config)
            self._start_deliverer(channel)

    async def set_websocket(self, caller: Principal, options: ChannelOptions | None) -> tuple[Channel, bool]:
        """spec §4.6: the channel exists (disconnected) and stores events at once; True when it is new."""
        if self._cluster is not None and caller.key_id not in self._channels:
            current = await self._store.get_channel(caller.key_id)
            if current is not None and current.kind == WEBSOCKET:  # owned elsewhere, or by nobody right now
                if options is not None and options != ChannelOptions.from_stored(current.serialization):
                    current = self._config(caller, WEBSOCKET, options, free_tier=current.free_tier)
                    await self._store.put_channel(current)
                    await self._changed(caller.key_id)
                return Channel(current, self._journal, self._counters, self._clock.now()), False  # a view
        async with self._lock:
            existing = self._channels.get(caller.key_id)
            if existing is not None and existing.kind == WEBSOCKET:
                if options is not None and options != existing.options:
                    config = self._config(caller, WEBSOCKET, options, free_tier=existing.config.free_tier)
                    await self._store.put_channel(config)
                    existing.reconfigure(config)
                return existing, False
            config = self._config(caller, WEBSOCKET, options or ChannelOptions())
            return await self._install(config), True

    async def delete_channel(self, key_id: str, kind: str) -> bool:
        """REST delete of the key's channel of this kind: queue dropped, open socket closed 1001 (spec §7)."""
        if self._cluster is not None and key_id not in self._channels:
            return await self._delete_elsewhere(key_id, kind)
        async with self._lock:
            channel = self._channels.get(key_id)
            if channel is None or channel.kind != kind:
                return False
            await self._remove_locked(channel, "deleted by a REST call", GOING_AWAY, "channel deleted")
        if self._cluster is not None:
            await self._cluster.drop_inbox(key_id)
            await self._changed(key_id, "deleted")
        return True

    async def _delete_elsewhere(self, key_id: str, kind: str) -> bool:
        """Redis mode, the channel is owned by another node (or none): delete it there through the store."""
        assert self._cluster is not None
        config = await self._store.get_channel(key_id)
        if config is None or config.kind != kind:
            return False
        await self._store.delete_channel(key_id)
        await self._cluster.drop_inbox(key_id)
        await self._changed(key_id, "deleted")
        return True

    async def _install(self, config: ChannelConfig) -> Channel:
        """Store the key's one channel; a previous one of any kind is replaced, its queue kept (spec §2.5)."""
        await self._store.put_channel(config)
        if self._cluster is not None and config.key_id not in self._channels:
            await self._changed(config.key_id)  # a previous owner hands its queue over
            owned = await self._own(config.key_id, take_over=True)
            assert owned is not None
            return owned
        channel = self._channels.get(config.key_id)
        if channel is None:
            return self._add(config, self._clock.now())
        await self._stop_transport(channel, GOING_AWAY, "channel replaced")
        channel.reconfigure(config)
        channel.disconnected_since = None
        channel.last_polled_at = self._clock.now()
        return channel

    def _config(
        self,
        caller: Principal,
        kind: str,
        options: ChannelOptions,
        *,
        url: str = "",
        headers: dict[str, str] | None = None,
        free_tier: bool | None = None,
    ) -> ChannelConfig:
        return ChannelConfig(
            key_id=caller.key_id,
            account_id=caller.account_id,
            kind=kind,
            url=url,
            headers=headers or {},
            serialization=options.to_wire(),
            created_at=self._clock.now(),
            # spec §8: the tier at creation stays with the channel
            free_tier=caller.free_tier if free_tier is None else free_tier,
        )

    def _add(self, config: ChannelConfig, now: float) -> Channel:
        channel = Channel(
            config,
            self._journal,
            self._counters,
            now,
            max_bytes=self._queue_max_bytes,
            max_batch_bytes=self._settings.max_batch_bytes,
        )
        self._channels[config.key_id] = channel
        self._by_account.setdefault(config.account_id, set()).add(config.key_id)
        return channel

    async def _remove(self, channel: Channel, reason: str) -> None:
        async with self._lock:
            if self._channels.get(channel.key_id) is channel:
                await self._remove_locked(channel, reason, GOING_AWAY, reason)

    async def _remove_locked(self, channel: Channel, reason: str, code: int, close_reason: str) -> None:
        log.info("channel of key %s (%s) removed: %s", channel.key_id, channel.kind, reason)
        del self._channels[channel.key_id]
        keys = self._by_account.get(channel.config.account_id)
        if keys is not None:
            keys.discard(channel.key_id)
            if not keys:
                del self._by_account[channel.config.account_id]
        channel.close()
        self._counters.channels_removed += 1
        await self._stop_transport(channel, code, close_reason)
        await self._journal.forget(channel.key_id)

    async def _stop_transport(self, channel: Channel, code: int, reason: str) -> None:
        """Stop what delivers the channel now (its batch that was out returns to the queue)."""
        task, channel.deliverer = channel.deliverer, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        while channel.session is not None:
            await channel.session.close(code, reason)
        if channel.polling:  # a waiting long poll answers 204 before anything else takes a batch
            channel.interrupt()
            await channel.poll_idle.wait()

    def _start_deliverer(self, channel: Channel) -> None:
        assert self._client is not None
        channel.deliverer = asyncio.create_task(
            callback.deliver(channel, self._client, self._clock, self._remove), name=f"callback-{channel.key_id}"
        )
        channel.deliverer.add_done_callback(_report_crash)

    # ---- WebSocket ----------------------------------------------------------------------------------
    async def serve_websocket(self, caller: Principal, ws: web.WebSocketResponse) -> None:
        """Bind an opened socket to the key's channel and serve it until it closes (spec §3.3, §4.7)."""
        channel = self._channels.get(caller.key_id)
        if channel is None and self._cluster is not None:
            config = await self._store.get_channel(caller.key_id)
            if config is not None and config.kind == WEBSOCKET:
                channel = await self._own(caller.key_id, take_over=True)
        if channel is None or channel.kind != WEBSOCKET:
            await ws.close(code=UNEXPECTED, message=b"no websocket channel for this key")  # spec §7
            return
        # spec §7: a second socket closes the first with 1001. Sockets that come while the first is closing all
        # wait for it, and which of them resumes first is the loop's to choose (uvloop and asyncio differ): the
        # newest is kept, any other closes itself as superseded
        channel.sockets_opened += 1
        ticket = channel.sockets_opened
        while channel.session is not None and channel.sockets_opened == ticket:
            await channel.session.close(GOING_AWAY, "another socket opened for this key")
        if channel.sockets_opened != ticket:
            await ws.close(code=GOING_AWAY, message=b"another socket opened for this key")
            return
        if self._channels.get(caller.key_id) is not channel or channel.kind != WEBSOCKET:
            await ws.close(code=UNEXPECTED, message=b"no websocket channel for this key")
            return
        session = WebSocketSession(
            ws,
            channel,
            self._clock,
            ping_payload=self._ping_payload,
            ping_interval=self._ping_interval,
            pong_timeout=self._pong_timeout,
            coalesce=self._websocket_coalesce,
        )
        channel.session = session
        channel.disconnected_since = None
        log.info("websocket of key %s connected", caller.key_id)
        await session.run(self._socket_ended)

    def _socket_ended(self, session: WebSocketSession) -> None:
        channel = session.channel
        if channel.session is session:
            log.info("websocket of key %s disconnected", channel.key_id)
            channel.session = None
            channel.disconnected_since = self._clock.now()  # events keep queueing for 24 h (spec §3.3)

    # ---- pull (deprecated, spec §4.8) ---------------------------------------------------------------
    async def pull(self, caller: Principal, send: Send) -> bool:
        """Long poll: `send` the next batch at once or when one arrives; False after the poll time-out."""
        channel = await self._pull_channel(caller)
        if channel.polling:
            raise Conflict("a pull request is already waiting", token="CONCURRENT_PULL_REQUEST_RECEIVED")
        channel.polling = True
        channel.poll_idle.clear()
        channel.last_polled_at = self._clock.now()
        try:
            batch = channel.take(int(self._clock.now() * 1000))
            if batch is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(channel.wait_for_events(), self._pull_timeout)
                if channel.closed or channel.stopping:
                    return False
                batch = channel.take(int(self._clock.now() * 1000))
                if batch is None:
                    return False
            try:
                await send(batch.body)
            except BaseException:
                channel.give_back(batch)
                raise
            channel.delivered(batch, self._clock.now())
            return True
        finally:
            channel.polling = False
            channel.poll_idle.set()
            channel.last_polled_at = self._clock.now()

    async def _pull_channel(self, caller: Principal) -> Channel:
        if self._cluster is not None and caller.key_id not in self._channels:
            config = await self._store.get_channel(caller.key_id)
            if config is not None and config.kind == PULL:
                owned = await self._own(caller.key_id, take_over=True)
                if owned is not None:
                    return owned
        async with self._lock:
            channel = self._channels.get(caller.key_id)
            if channel is not None and channel.kind != PULL:
                raise BadRequest(f"the key has a {channel.kind} channel", token="NOTIFICATION_CHANNEL_EXISTS")
            if channel is not None:
                return channel
            if self._pull_gone.get(caller.key_id, 0.0) > self._clock.now():
                raise Gone("the pull channel was deleted", token="CHANNEL_DELETED")
            return await self._install(self._config(caller, PULL, ChannelOptions()))

    async def delete_pull(self, caller: Principal) -> str:
        """`REMOVED`, or `ALREADY_DELETED` when the key has no pull channel (a 2xx either way)."""
        if self._cluster is not None and caller.key_id not in self._channels:
            deleted = await self._delete_elsewhere(caller.key_id, PULL)
            if deleted:
                self._pull_gone[caller.key_id] = self._clock.now() + self._pull_gone_s
            return "REMOVED" if deleted else "ALREADY_DELETED"
        async with self._lock:
            channel = self._channels.get(caller.key_id)
            if channel is None or channel.kind != PULL:
                return "ALREADY_DELETED"
            self._pull_gone[caller.key_id] = self._clock.now() + self._pull_gone_s
            await self._remove_locked(channel, "pull channel deleted", GOING_AWAY, "channel deleted")
        if self._cluster is not None:
            await self._cluster.drop_inbox(caller.key_id)
            await self._changed(caller.key_id, "deleted")
        return "REMOVED"

    # ---- sweeper (clock-driven) -------------------------------------------------------------------
    async def _sweep_forever(self) -> None:
        while True:
            await self._clock.sleep(self._sweep_interval)
            try:
                await self.sweep()
            except Exception:
                log.exception("channel sweep failed")

    async def sweep(self) -> None:
        """Apply the time rules once: event lifetime, idle and disconnected channels, inactive sockets."""
        now = self._clock.now()
        for key, until in list(self._pull_gone.items()):
            if until <= now:
                del self._pull_gone[key]
        for channel in list(self._channels.values()):
            channel.expire(int(now * 1000))  # spec §8: events older than 24 hours are removed
            reason = self._removal_reason(channel, now)
            if reason is not None:
                await self._remove(channel, reason)
            elif channel.session is not None and now - channel.session.last_activity >= INACTIVITY_TIMEOUT_S:
                await channel.session.close(GOING_AWAY, "inactivity")  # spec §3.3, §8

    @staticmethod
    def _removal_reason(channel: Channel, now: float) -> str | None:
        if now - channel.last_data_at >= IDLE_TIMEOUT_S:
            return "no data for 48 hours"
        if (
            channel.kind == WEBSOCKET
            and channel.disconnected_since is not None
            and now - channel.disconnected_since >= DISCONNECTED_TIMEOUT_S
        ):
            return "socket not reconnected within 24 hours"
        if channel.kind == PULL and not channel.polling and now - channel.last_polled_at >= UNPOLLED_TIMEOUT_S:
            return "not polled for 10 minutes"
        if (
            channel.kind == CALLBACK
            and channel.failing_since is not None
            and now - channel.failing_since >= callback.FAIL_TIMEOUT_S
        ):
            return "callback delivery failing for 24 hours"
        return None

    # ---- Redis mode: ownership of channels across nodes (cluster.py) -----------------------------------
    async def _refresh_configs(self) -> None:
        configs = await self._store.list_channels()
        self._configs = {c.key_id: (c, ChannelOptions.from_stored(c.serialization)) for c in configs}
        accounts: dict[str, set[str]] = {}
        for config in configs:
            accounts.setdefault(config.account_id, set()).add(config.key_id)
        self._cluster_accounts = accounts

    async def _changed(self, key_id: str, verb: str = "changed") -> None:
        assert self._cluster is not None
        await self._refresh_configs()
        await self._cluster.send(verb, key_id)

    async def _on_control(self, verb: str, key_id: str, sender: str) -> None:
        if verb in ("changed", "deleted"):
            await self._refresh_configs()
        channel = self._channels.get(key_id)
        if channel is None:
            return
        async with self._lock:
            if self._channels.get(key_id) is not channel:
                return
            if verb == "deleted":
                await self._remove_locked(channel, f"deleted on node {sender}", GOING_AWAY, "channel deleted")
            elif verb == "release":
                await self._release_locked(channel, "another socket opened for this key")
            elif verb == "changed":
                entry = self._configs.get(key_id)
                if entry is not None and entry[0] != channel.config:
                    await self._release_locked(channel, "channel replaced")

    async def _release_locked(self, channel: Channel, reason: str) -> None:
        """Hand the channel to another node: close the socket 1001, write the journal, drop the lease."""
        assert self._cluster is not None
        await self._stop_transport(channel, GOING_AWAY, reason)
        del self._channels[channel.key_id]
        keys = self._by_account.get(channel.config.account_id)
        if keys is not None:
            keys.discard(channel.key_id)
        channel.close()
        await self._journal.release(channel.key_id)
        await self._store.release_lease(_lease(channel.key_id), self._cluster.node_id)
        log.info("channel of key %s handed over (%s)", channel.key_id, reason)

    async def _own(self, key_id: str, *, take_over: bool) -> Channel | None:
        """Become the owner of the key's channel (lease, journal, queue); None when it has none or is taken."""
        assert self._cluster is not None
        lock = self._adopting.setdefault(key_id, asyncio.Lock())
        async with lock:
            channel = self._channels.get(key_id)
            if channel is not None:
                return channel
            loop = asyncio.get_running_loop()
            deadline = loop.time() + LEASE_TTL + 2
            asked = False
            while not await self._store.acquire_lease(_lease(key_id), self._cluster.node_id, LEASE_TTL, time.time()):
                if not take_over:
                    return None
                if not asked:
                    await self._cluster.send("release", key_id)
                    asked = True
                if loop.time() > deadline:
                    raise Unavailable("the channel's owner node did not hand it over", token="CHANNEL_BUSY")
                await asyncio.sleep(0.05)  # the owner answers by releasing, or its lease runs out
            config = await self._store.get_channel(key_id)
            if config is None:
                await self._store.release_lease(_lease(key_id), self._cluster.node_id)
                return None
            # not under self._lock: callers installing a channel hold it; the per-key lock keeps adoption single
            channel = self._add(config, self._clock.now())
            channel.restore(await self._journal.load(key_id), await self._journal.load_drops(key_id))
            if channel.kind == WEBSOCKET:
                channel.disconnected_since = self._clock.now()
            log.info("node %s owns the channel of key %s", self._cluster.node_id, key_id)
            return channel

    async def _drain_forever(self) -> None:
        # real time, like the journal: this bounds how long an event waits in Redis before its owner queues it
        while True:
            await asyncio.sleep(0.02)
            try:
                await self._drain_once()
            except Exception as error:
                self._outage("draining channel inboxes", error)
            else:
                self._recovered("draining channel inboxes")

    async def _drain_once(self) -> None:
        """Inbox → local queue → journal in Redis, and only then trim the inbox: a crash loses nothing."""
        assert self._cluster is not None
        if not self._channels:
            return
        found = await self._cluster.peek(list(self._channels))
        taken: dict[str, int] = {}
        for key_id, events in found.items():
            channel = self._channels.get(key_id)
            if channel is None:
                continue  # handed over meanwhile: the events stay for the next owner
            for event in events:
                channel.push(event.kind, event.data, event.queued_at_ms)
            taken[key_id] = len(events)
        if taken:
            await self._journal.flush()
            await self._cluster.trim(taken)

    async def _hold_forever(self) -> None:
        """Renew this node's leases; adopt channels nobody owns (a dead node's, or ones set up meanwhile)."""
        assert self._cluster is not None
        while True:
            await asyncio.sleep(LEASE_TTL / 3)
            try:
                for key_id in list(self._channels):
                    if not await self._store.acquire_lease(
                        _lease(key_id), self._cluster.node_id, LEASE_TTL, time.time()
                    ):
                        log.warning("lost the lease of key %s to another node", key_id)
                        channel = self._channels.get(key_id)
                        if channel is not None:
                            async with self._lock:
                                await self._release_locked(channel, "owned by another node")
                await self._refresh_configs()
                # every channel has an owner: it queues under the byte cap, and its time rules run once (spec §8)
                for key_id in list(self._configs):
                    if key_id not in self._channels:
                        channel = await self._own(key_id, take_over=False)
                        if channel is not None and channel.kind == CALLBACK:
                            self._start_deliverer(channel)
            except Exception as error:
                self._outage("lease upkeep", error)
            else:
                self._recovered("lease upkeep")

    def _outage(self, task: str, error: Exception) -> None:
        """A Redis task failed: said once per outage (it retries every few milliseconds), with a traceback only
        when the failure is not Redis being unreachable."""
        if task in self._failing:
            return
        self._failing.add(task)
        if unreachable(error):
            log.warning("%s failed: Redis unreachable (%s); retrying", task, error)
        else:
            log.exception("%s failed; retrying", task)

    def _recovered(self, task: str) -> None:
        if task in self._failing:
            self._failing.discard(task)
            log.info("%s works again", task)

    # ---- state -------------------------------------------------------------------------------------
    def metrics(self) -> dict[str, int | float]:
        """Gauges of the channels now and counters since start (the lead exports them on /metrics)."""
        channels = self._channels.values()
        return {
            "channels": len(self._channels),
            "channels_callback": sum(1 for c in channels if c.kind == CALLBACK),
            "channels_websocket": sum(1 for c in channels if c.kind == WEBSOCKET),
            "channels_pull": sum(1 for c in channels if c.kind == PULL),
            "websockets_connected": sum(1 for c in channels if c.session is not None),
            "callbacks_failing": sum(1 for c in channels if c.consecutive_failures),
            "queued_events": sum(c.size for c in channels),
            "queued_bytes": sum(c.queue.bytes_used for c in channels),
            "journal_pending_events": self._journal.pending_events,
            "events_queued_total": sum(self._counters.queued_by_kind.values()),
            "events_delivered_total": self._counters.events_delivered,
            "dropped_overflow_total": self._counters.dropped_overflow,
            "dropped_expired_total": self._counters.dropped_expired,
            "dropped_failed_total": self._counters.dropped_failed,
            "delivery_failures_total": self._counters.delivery_failures,
            "channels_removed_total": self._counters.channels_removed,
        }


def _lease(key_id: str) -> str:
    return f"channel:{key_id}"


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped by an unexpected error", task.get_name(), exc_info=task.exception())
