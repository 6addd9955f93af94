"""The channel hub: one channel per API key (spec §2.5), events in, batches out by callback, WebSocket or pull.

A façade over the parts, so the node and the API hold one object: registry.py (channels by key), lifecycle.py
(create, replace, remove; transports), publish.py (events in), pull.py (long poll), sweeper.py (time rules),
ownership.py (Redis mode), gauges.py (figures).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable, Sequence

from aiohttp import web

from devicehub._core import DEFAULT_MAX_BYTES
from devicehub.channels import callback
from devicehub.channels.callback import CallbackClient, CallbackTarget
from devicehub.channels.channel import CALLBACK, WEBSOCKET, Channel, Counters
from devicehub.channels.cluster import ClusterLink
from devicehub.channels.delivery import DeliveryOptions
from devicehub.channels.encode import EventEncoder
from devicehub.channels.gauges import channel_figures
from devicehub.channels.journal import Journal
from devicehub.channels.lifecycle import ChannelLifecycle, SocketTimers
from devicehub.channels.options import ChannelOptions
from devicehub.channels.ownership import ClusterOwnership
from devicehub.channels.publish import Publisher
from devicehub.channels.pull import PullChannels, Send
from devicehub.channels.registry import ChannelRegistry
from devicehub.channels.removals import Removals
from devicehub.channels.sweeper import Sweeper
from devicehub.channels.targets import TargetPolicy
from devicehub.channels.view import ChannelView, view_of
from devicehub.channels.websocket import COALESCE_S, GOING_AWAY
from devicehub.clock import Clock
from devicehub.config import ServeSettings
from devicehub.domain.accounts import Principal
from devicehub.domain.events import Event
from devicehub.domain.storage.store import Store

log = logging.getLogger("devicehub.channels")


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
        self._callback_timeout = callback_timeout
        self._counters = Counters()
        self._registry = ChannelRegistry()
        self._journal = Journal(store, settings.flush_interval_ms / 1000)
        encoder = EventEncoder()
        self._lifecycle = ChannelLifecycle(
            store,
            clock,
            self._registry,
            self._journal,
            self._counters,
            queue_max_bytes=queue_max_bytes,
            max_batch_bytes=settings.max_batch_bytes,
            sockets=SocketTimers(ping_payload, ping_interval, pong_timeout, websocket_coalesce),
        )
        self._ownership: ClusterOwnership | None = None
        if cluster is not None:
            self._ownership = ClusterOwnership(
                cluster, store, clock, self._registry, self._lifecycle, self._journal, encoder, uid_source
            )
            self._lifecycle.ownership = self._ownership
        self._publisher = Publisher(
            self._registry,
            clock,
            encoder,
            uid_source,
            forward=self._ownership.forward if self._ownership is not None else None,
            accounts=self._ownership.account_keys if self._ownership is not None else None,
        )
        self._pull = PullChannels(self._lifecycle, self._registry, clock, timeout=pull_timeout, gone_s=pull_gone_s)
        self._sweeper = Sweeper(
            self._registry, clock, self._lifecycle.remove, sweep_interval, forget_gone=self._pull.forget_gone
        )

    # ---- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load channels and their journaled events, then start deliverers, the sweeper and the flusher."""
        policy = TargetPolicy.from_settings(self._settings.callback_allow, dev=self._settings.dev)
        client = CallbackClient(self._clock, callback.tls_context(self._settings), self._callback_timeout, policy)
        await client.start()
        self._lifecycle.client = client
        now = self._clock.now()
        if self._ownership is not None:
            await self._ownership.start()
        for config in await self._store.list_channels() if self._ownership is None else []:
            channel = self._lifecycle.add(config, now)
            channel.restore(await self._journal.load(config.key_id), await self._journal.load_drops(config.key_id))
            if channel.kind == CALLBACK:
                self._lifecycle.start_deliverer(channel)
            elif channel.kind == WEBSOCKET:
                channel.disconnected_since = now  # its socket, if any, closed when the previous process stopped
        self._journal.start()
        self._sweeper.start()
        log.info("channel hub started with %d channels", len(self._registry))

    async def stop(self) -> None:
        """Close sockets with 1001, stop deliverers and write the journal (a graceful stop loses nothing)."""
        client = self._lifecycle.client
        if client is None:
            return  # not started, or stopped already
        await self._sweeper.stop()
        if self._ownership is not None:
            await self._ownership.stop_tasks()
        await self.release_clients()
        for channel in self._registry.channels():
            await self._lifecycle.stop_transport(channel, GOING_AWAY, "server shutting down")
        await self._journal.stop()
        if self._ownership is not None:
            await self._ownership.close()
        await client.close()
        self._lifecycle.client = None

    async def release_clients(self) -> None:
        """Close every open WebSocket with 1001 (spec §7: server shutting down) and answer waiting polls 204."""
        sessions = [c.session for c in self._registry if c.session is not None]
        await asyncio.gather(*(s.close(GOING_AWAY, "server shutting down") for s in sessions))
        for channel in self._registry:
            if channel.polling:
                channel.interrupt()

    # ---- events in -----------------------------------------------------------------------------------
    async def publish(self, key_ids: Sequence[str], event: Event) -> None:
        """Notifications and async-responses: to those keys' channels (no channel: not stored)."""
        await self._publisher.publish_many(((key_ids, event),))

    async def publish_many(self, events: Sequence[tuple[Sequence[str], Event]]) -> None:
        """`publish` for each (keys, event) in order, with one clock reading (a loop turn's notifications)."""
        await self._publisher.publish_many(events)

    async def publish_account(self, account_id: str, event: Event) -> None:
        """Lifecycle events: to every channel of the account (architecture.md "Event routing rules")."""
        await self._publisher.publish_account(account_id, event)

    # ---- channel administration ------------------------------------------------------------------
    @property
    def callback_client(self) -> CallbackClient | None:
        """The HTTP client of every callback channel (after start), for hooks such as callback latency."""
        return self._lifecycle.client

    def largest_queues(self, count: int) -> list[Channel]:
        """This node's `count` channels holding the most queued bytes, largest first."""
        return self._registry.largest_queues(count)

    @property
    def counters(self) -> Counters:
        """Hub-wide counters, and the hook that observes deliveries (metrics)."""
        return self._counters

    @property
    def removals(self) -> Removals:
        """issue 34 #4: the channels removed lately, and the observer told of each (the console's feed)."""
        return self._lifecycle.removals

    def channel(self, key_id: str) -> Channel | None:
        return self._registry.get(key_id)

    async def view(self, key_id: str) -> ChannelView | None:
        """What the channel GETs show of the key's channel: this node's, or in Redis mode the owner's, asked."""
        channel = self._registry.get(key_id)
        if channel is not None:
            return view_of(channel, self._clock.now())
        return None if self._ownership is None else await self._ownership.ask_view(key_id)

    async def set_callback(self, caller: Principal, target: CallbackTarget) -> None:
        """spec §4.5: verify the URL with a PUT answered 200, then store it (replacing the key's channel)."""
        await self._lifecycle.set_callback(caller, target)

    async def rotate_secret(self, caller: Principal, secret: str | None) -> str:
        """issue 34 #3: a new signing secret for the key's callback channel; the previous ones sign for the overlap."""
        return await self._lifecycle.rotate_secret(caller, secret, self._settings.callback_secret_overlap)

    async def set_websocket(
        self, caller: Principal, options: ChannelOptions | None, control: DeliveryOptions | None = None
    ) -> tuple[Channel, bool]:
        """spec §4.6: the channel exists (disconnected) and stores events at once; True when it is new."""
        return await self._lifecycle.set_websocket(caller, options, control)

    async def delete_channel(self, key_id: str, kind: str) -> bool:
        """REST delete of the key's channel of this kind: queue dropped, open socket closed 1001 (spec §7)."""
        return await self._lifecycle.delete_channel(key_id, kind)

    async def serve_websocket(self, caller: Principal, ws: web.WebSocketResponse, cursor: int | None = None) -> None:
        """Bind an opened socket to the key's channel and serve it until it closes (spec §3.3, §4.7); with
        `cursor` (issue 34 #1) the retained events after it come first."""
        await self._lifecycle.serve_websocket(caller, ws, cursor)

    async def redrive(self, caller: Principal, after: int) -> int:
        """issue 34 #1: the callback channel delivers the retained events after cursor `after` again."""
        return await self._lifecycle.redrive(caller, after)

    async def redrive_dead_letters(self, caller: Principal) -> int:
        """issue 34 #5: the key's channel (any kind) queues its retained dead letters again; returns how many."""
        return await self._lifecycle.redrive_dead_letters(caller)

    # ---- pull (deprecated, spec §4.8) ---------------------------------------------------------------
    async def pull(self, caller: Principal, send: Send, cursor: int | None = None) -> bool:
        """Long poll: `send` the next batch at once or when one arrives; False after the poll time-out. With
        `cursor` (issue 34 #1) the retained events after it come first."""
        return await self._pull.pull(caller, send, cursor)

    async def delete_pull(self, caller: Principal) -> str:
        """`REMOVED`, or `ALREADY_DELETED` when the key has no pull channel (a 2xx either way)."""
        return await self._pull.delete(caller)

    # ---- time rules and figures ------------------------------------------------------------------------
    async def sweep(self) -> None:
        """Apply the time rules once: event lifetime, idle and disconnected channels, inactive sockets."""
        await self._sweeper.sweep()

    def metrics(self) -> dict[str, int | float]:
        """Gauges of the channels now and counters since start (the lead exports them on /metrics)."""
        return channel_figures(self._registry, self._counters, self._journal.pending_events)

    def routes(self, key_id: str) -> bool:
        """Whether an event for `key_id` published on this node reaches its channel: one this node holds, or (Redis
        mode) one whose configuration it has from the cluster and forwards to the owner. Asked by tests of cluster
        forwarding before they publish, as an operator would ask which node a channel's events go through."""
        if self._ownership is not None:
            return self._ownership.knows(key_id)
        return self._registry.get(key_id) is not None
