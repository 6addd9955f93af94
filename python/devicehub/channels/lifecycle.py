"""Creating, replacing and removing the key's one channel (spec §2.5, §4.5–4.6, §7), and its transports."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import msgspec
from aiohttp import web

from devicehub.channels import callback, signing
from devicehub.channels.callback import CallbackClient, CallbackTarget
from devicehub.channels.channel import CALLBACK, PULL, WEBSOCKET, Channel, Counters
from devicehub.channels.delivery import DeliveryOptions
from devicehub.channels.journal import Journal
from devicehub.channels.options import ChannelOptions
from devicehub.channels.registry import ChannelRegistry
from devicehub.channels.removals import Removals, removal
from devicehub.channels.websocket import GOING_AWAY, POLICY_VIOLATION, UNEXPECTED, WebSocketSession
from devicehub.clock import Clock
from devicehub.domain.accounts import Principal
from devicehub.domain.model import ChannelConfig, ChannelSecret
from devicehub.domain.storage.store import Store
from devicehub.errors import NotFound

log = logging.getLogger("devicehub.channels")


class Ownership(Protocol):
    """Redis mode (ownership.py): which node owns a key's channel. Without it this node owns every channel."""

    async def own(self, key_id: str, *, take_over: bool) -> Channel | None:
        """Become the owner of the key's channel; None when it has none, or (not `take_over`) another node has."""

    async def changed(self, key_id: str, verb: str = "changed") -> None:
        """Tell the other nodes the key's channel changed or was deleted."""

    async def drop_inbox(self, key_id: str) -> None:
        """Forget the events forwarded to the key and not yet queued by its owner."""


@dataclass(frozen=True, slots=True)
class SocketTimers:
    """The WebSocket sessions' parameters (see websocket.py); times in clock seconds."""

    ping_payload: Callable[[], bytes]
    ping_interval: float
    pong_timeout: float
    coalesce: float


class ChannelLifecycle:
    """Channel creation, replacement and removal happen one at a time, under `lock`."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        registry: ChannelRegistry,
        journal: Journal,
        counters: Counters,
        *,
        queue_max_bytes: int,
        max_batch_bytes: int | None,
        sockets: SocketTimers,
    ) -> None:
        self.store = store
        self._clock = clock
        self._registry = registry
        self._journal = journal
        self._counters = counters
        self._queue_max_bytes = queue_max_bytes
        self._max_batch_bytes = max_batch_bytes
        self._sockets = sockets
        self.lock = asyncio.Lock()
        self.client: CallbackClient | None = None  # set at start
        self.ownership: Ownership | None = None  # set in Redis mode
        self.removals = Removals()  # issue 34 #4: what was removed, when and why (removals.py)

    # ---- administration (REST) -------------------------------------------------------------------
    async def set_callback(self, caller: Principal, target: CallbackTarget) -> None:
        """spec §4.5: verify the URL with a PUT answered 200, then store it (replacing the key's channel)."""
        assert self.client is not None, "ChannelHub.start() first"
        if target.secret is not None:
            secrets = [ChannelSecret(target.secret)]
        else:  # a registration without a secret keeps the channel's (applications re-register at start)
            current = await self.store.get_channel(caller.key_id)
            secrets = list(current.secrets) if current is not None and current.kind == CALLBACK else []
        await self.client.verify(target.url, target.headers, caller.key_id, secrets)
        config = self.config(caller, CALLBACK, target.options, url=target.url, headers=target.headers)
        config = msgspec.structs.replace(config, secrets=secrets, delivery=msgspec.to_builtins(target.delivery))
        async with self.lock:
            channel = await self.install(config)
            self.start_deliverer(channel)

    async def rotate_secret(self, caller: Principal, secret: str | None, overlap_s: float) -> str:
        """issue 34 #3: a new signing secret for the key's callback channel (given or generated); the ones in force
        keep signing for `overlap_s` more seconds. Returns the new secret."""
        new = secret or signing.generate()
        async with self.lock:
            current = await self.store.get_channel(caller.key_id)
            if current is None or current.kind != CALLBACK:
                raise NotFound("no callback channel for this key")
            secrets = signing.rotate(current.secrets, new, time.time(), overlap_s)
            config = msgspec.structs.replace(current, secrets=secrets)
            await self.store.put_channel(config)
            channel = self._registry.get(caller.key_id)
            if channel is not None and channel.kind == CALLBACK:
                channel.config = config  # the deliverer reads it for each attempt; nothing else changes
        if self.ownership is not None and (channel is None or channel.kind != CALLBACK):
            await self.ownership.changed(caller.key_id)  # its owner hands it over and takes the new config
        return new

    async def redrive(self, caller: Principal, after: int) -> int:
        """issue 34 #1: the callback channel delivers again every retained event after cursor `after`; returns how
        many after it are no longer retained."""
        channel = await self._owned(caller, (CALLBACK,))
        async with self.lock:
            if channel is None or self._registry.get(caller.key_id) is not channel:
                raise NotFound("no callback channel for this key")
            if channel.cursors is None:
                channel.rewind(after, 0)  # raises: the channel has no cursors
            await self.stop_transport(channel, GOING_AWAY, "redrive")  # its batch that was out is back
            lost = channel.rewind(after, int(self._clock.now() * 1000))
            channel.reconfigure(channel.config)  # a fresh start: no retry wait from earlier failures
            self.start_deliverer(channel)
        return lost

    async def redrive_dead_letters(self, caller: Principal) -> int:
        """issue 34 #5: the key's channel queues its retained dead letters again; returns how many."""
        channel = await self._owned(caller, (CALLBACK, WEBSOCKET, PULL))
        if channel is None:
            raise NotFound("no notification channel for this key")
        return channel.redrive_dead_letters(int(self._clock.now() * 1000))

    async def _owned(self, caller: Principal, kinds: tuple[str, ...]) -> Channel | None:
        """The key's channel of one of `kinds`, owned by this node (taken over in Redis mode), or None."""
        channel = self._registry.get(caller.key_id)
        if channel is None and self.ownership is not None:
            config = await self.store.get_channel(caller.key_id)
            if config is not None and config.kind in kinds:
                channel = await self.ownership.own(caller.key_id, take_over=True)
                if channel is not None and channel.kind == CALLBACK and channel.deliverer is None:
                    self.start_deliverer(channel)
        return channel if channel is not None and channel.kind in kinds else None

    async def set_websocket(
        self, caller: Principal, options: ChannelOptions | None, control: DeliveryOptions | None = None
    ) -> tuple[Channel, bool]:
        """spec §4.6: the channel exists (disconnected) and stores events at once; True when it is new. None keeps
        the serialization options (or the delivery control, issue 34 #4) the channel has."""
        if self.ownership is not None and caller.key_id not in self._registry:
            current = await self.store.get_channel(caller.key_id)
            if current is not None and current.kind == WEBSOCKET:  # owned elsewhere, or by nobody right now
                changed = self._socket_config(caller, current, options, control)
                if changed is not None:
                    current = changed
                    await self.store.put_channel(current)
                    await self.ownership.changed(caller.key_id)
                return Channel(current, self._journal, self._counters, self._clock.now()), False  # a view
        async with self.lock:
            existing = self._registry.get(caller.key_id)
            if existing is not None and existing.kind == WEBSOCKET:
                config = self._socket_config(caller, existing.config, options, control)
                if config is not None:
                    await self.store.put_channel(config)
                    existing.reconfigure(config)
                return existing, False
            config = self.config(caller, WEBSOCKET, options or ChannelOptions())
            if control is not None:
                config = msgspec.structs.replace(config, delivery=msgspec.to_builtins(control))
            return await self.install(config), True

    def _socket_config(
        self, caller: Principal, current: ChannelConfig, options: ChannelOptions | None, control: DeliveryOptions | None
    ) -> ChannelConfig | None:
        """The WebSocket channel's new config, or None when the PUT changes nothing."""
        serialization = options.to_wire() if options is not None else current.serialization
        delivery = msgspec.to_builtins(control) if control is not None else current.delivery
        if serialization == current.serialization and delivery == current.delivery:
            return None
        config = self.config(caller, WEBSOCKET, ChannelOptions.from_stored(serialization), free_tier=current.free_tier)
        return msgspec.structs.replace(config, delivery=delivery)

    async def delete_channel(self, key_id: str, kind: str) -> bool:
        """REST delete of the key's channel of this kind: queue dropped, open socket closed 1001 (spec §7)."""
        if self.ownership is not None and key_id not in self._registry:
            return await self.delete_elsewhere(key_id, kind)
        async with self.lock:
            channel = self._registry.get(key_id)
            if channel is None or channel.kind != kind:
                return False
            await self.remove_locked(channel, "deleted by a REST call", GOING_AWAY, "channel deleted")
        if self.ownership is not None:
            await self.ownership.drop_inbox(key_id)
            await self.ownership.changed(key_id, "deleted")
        return True

    async def delete_elsewhere(self, key_id: str, kind: str) -> bool:
        """Redis mode, the channel is owned by another node (or none): delete it there through the store."""
        assert self.ownership is not None
        config = await self.store.get_channel(key_id)
        if config is None or config.kind != kind:
            return False
        await self.store.delete_channel(key_id)
        await self.ownership.drop_inbox(key_id)
        await self.ownership.changed(key_id, "deleted")
        return True

    # ---- the primitives (callers hold `lock`) --------------------------------------------------------
    async def install(self, config: ChannelConfig) -> Channel:
        """Store the key's one channel; a previous one of any kind is replaced, its queue kept (spec §2.5)."""
        self.removals.forget(config.key_id)
        await self.store.put_channel(config)
        if self.ownership is not None and config.key_id not in self._registry:
            await self.ownership.changed(config.key_id)  # a previous owner hands its queue over
            owned = await self.ownership.own(config.key_id, take_over=True)
            assert owned is not None
            return owned
        channel = self._registry.get(config.key_id)
        if channel is None:
            return self.add(config, self._clock.now())
        await self.stop_transport(channel, GOING_AWAY, "channel replaced")
        channel.reconfigure(config)
        channel.disconnected_since = None
        channel.last_polled_at = self._clock.now()
        return channel

    def config(
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

    def add(self, config: ChannelConfig, now: float) -> Channel:
        channel = Channel(
            config,
            self._journal,
            self._counters,
            now,
            max_bytes=self._queue_max_bytes,
            max_batch_bytes=self._max_batch_bytes,
        )
        self._registry.add(channel)
        return channel

    async def remove(self, channel: Channel, reason: str) -> None:
        async with self.lock:
            if self._registry.get(channel.key_id) is channel:
                await self.remove_locked(channel, reason, GOING_AWAY, reason)

    async def remove_locked(self, channel: Channel, reason: str, code: int, close_reason: str) -> None:
        log.info("channel of key %s (%s) removed: %s", channel.key_id, channel.kind, reason)
        self._registry.discard(channel)
        now = self._clock.now()
        record = removal(channel.kind, channel.config.url, reason, channel.removed_gone, now)
        self.removals.record(channel.key_id, channel.config.account_id, record, now)  # issue 34 #4
        channel.close()
        self._counters.channels_removed += 1
        if channel.removed_gone:
            self._counters.channels_removed_gone += 1
        await self.stop_transport(channel, code, close_reason)
        await self._journal.forget(channel.key_id)

    async def stop_transport(self, channel: Channel, code: int, reason: str) -> None:
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

    def start_deliverer(self, channel: Channel) -> None:
        assert self.client is not None
        channel.deliverer = asyncio.create_task(
            callback.deliver(channel, self.client, self._clock, self.remove), name=f"callback-{channel.key_id}"
        )
        channel.deliverer.add_done_callback(_report_crash)

    # ---- WebSocket ----------------------------------------------------------------------------------
    async def serve_websocket(self, caller: Principal, ws: web.WebSocketResponse, cursor: int | None = None) -> None:
        """Bind an opened socket to the key's channel and serve it until it closes (spec §3.3, §4.7); with
        `cursor`, the events after it are queued again first (issue 34 #1)."""
        channel = self._registry.get(caller.key_id)
        if channel is None and self.ownership is not None:
            config = await self.store.get_channel(caller.key_id)
            if config is not None and config.kind == WEBSOCKET:
                channel = await self.ownership.own(caller.key_id, take_over=True)
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
        if self._registry.get(caller.key_id) is not channel or channel.kind != WEBSOCKET:
            await ws.close(code=UNEXPECTED, message=b"no websocket channel for this key")
            return
        if cursor is not None:
            if channel.cursors is None:
                await ws.close(code=POLICY_VIOLATION, message=b"the channel's events carry no cursor")
                return
            channel.rewind(cursor, int(self._clock.now() * 1000))  # the previous socket's batch is back: none out
        sockets = self._sockets
        session = WebSocketSession(
            ws,
            channel,
            self._clock,
            ping_payload=sockets.ping_payload,
            ping_interval=sockets.ping_interval,
            pong_timeout=sockets.pong_timeout,
            coalesce=sockets.coalesce,
        )
        channel.session = session
        channel.disconnected_since = None
        log.info("websocket of key %s connected", caller.key_id)
        await session.run(self._ended(channel))

    def _ended(self, channel: Channel) -> Callable[[WebSocketSession], None]:
        def ended(session: WebSocketSession) -> None:
            if channel.session is session:
                log.info("websocket of key %s disconnected", channel.key_id)
                channel.session = None
                channel.disconnected_since = self._clock.now()  # events keep queueing for 24 h (spec §3.3)

        return ended


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped by an unexpected error", task.get_name(), exc_info=task.exception())
