"""The channel hub: one channel per API key (spec §2.5), events in, batches out by callback, WebSocket or pull."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from devicehub._core import DEFAULT_MAX_BYTES
from devicehub.channels import callback
from devicehub.channels.callback import CallbackClient, CallbackTarget
from devicehub.channels.channel import CALLBACK, PULL, WEBSOCKET, Channel, Counters
from devicehub.channels.encode import EventEncoder
from devicehub.channels.journal import Journal
from devicehub.channels.options import ChannelOptions
from devicehub.channels.websocket import GOING_AWAY, UNEXPECTED, WebSocketSession
from devicehub.clock import Clock
from devicehub.config import ServeSettings
from devicehub.domain.accounts import Principal
from devicehub.domain.events import Event
from devicehub.errors import BadRequest, Conflict, Gone
from devicehub.store.base import Store
from devicehub.store.records import ChannelConfig

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
        pull_timeout: float = 30.0,
        pull_gone_s: float = 60.0,
        callback_timeout: float = callback.REQUEST_TIMEOUT_S,
        sweep_interval: float = 60.0,
        queue_max_bytes: int = DEFAULT_MAX_BYTES,
        uid_source: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self._store = store
        self._clock = clock
        self._settings = settings
        self._ping_payload = ping_payload
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
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

    # ---- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load channels and their journaled events, then start deliverers, the sweeper and the flusher."""
        self._client = CallbackClient(self._clock, callback.tls_context(self._settings), self._callback_timeout)
        await self._client.start()
        now = self._clock.now()
        for config in await self._store.list_channels():
            channel = self._add(config, now)
            channel.restore(await self._journal.load(config.key_id))
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
        await self.release_clients()
        for channel in list(self._channels.values()):
            await self._stop_transport(channel, GOING_AWAY, "server shutting down")
        await self._journal.stop()
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
    async def publish(self, key_ids: Iterable[str], event: Event) -> None:
        """Notifications and async-responses: to those keys' channels (no channel: not stored)."""
        self._push((c for c in map(self._channels.get, key_ids) if c is not None), event)

    async def publish_account(self, account_id: str, event: Event) -> None:
        """Lifecycle events: to every channel of the account (architecture.md "Event routing rules")."""
        self._push((self._channels[k] for k in self._by_account.get(account_id, ())), event)

    def _push(self, channels: Iterable[Channel], event: Event) -> None:
        now_ms = int(self._clock.now() * 1000)
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
    def channel(self, key_id: str) -> Channel | None:
        return self._channels.get(key_id)

    async def set_callback(self, caller: Principal, target: CallbackTarget) -> None:
        """spec §4.5: verify the URL with a PUT answered 200, then store it (replacing the key's channel)."""
        assert self._client is not None, "ChannelHub.start() first"
        await self._client.verify(target.url, target.headers)
        config = self._config(caller, CALLBACK, target.options, url=target.url, headers=target.headers)
        async with self._lock:
            channel = await self._install(config)
            self._start_deliverer(channel)

    async def set_websocket(self, caller: Principal, options: ChannelOptions | None) -> tuple[Channel, bool]:
        """spec §4.6: the channel exists (disconnected) and stores events at once; True when it is new."""
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
        async with self._lock:
            channel = self._channels.get(key_id)
            if channel is None or channel.kind != kind:
                return False
            await self._remove_locked(channel, "deleted by a REST call", GOING_AWAY, "channel deleted")
            return True

    async def _install(self, config: ChannelConfig) -> Channel:
        """Store the key's one channel; a previous one of any kind is replaced, its queue kept (spec §2.5)."""
        await self._store.put_channel(config)
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
        channel = Channel(config, self._journal, self._counters, now, max_bytes=self._queue_max_bytes)
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
        if channel is None or channel.kind != WEBSOCKET:
            await ws.close(code=UNEXPECTED, message=b"no websocket channel for this key")  # spec §7
            return
        while channel.session is not None:  # spec §7: a second socket closes the first with 1001
            await channel.session.close(GOING_AWAY, "another socket opened for this key")
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
        )
        channel.session = session
        channel.disconnected_since = None
        await session.run(self._socket_ended)

    def _socket_ended(self, session: WebSocketSession) -> None:
        channel = session.channel
        if channel.session is session:
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
        async with self._lock:
            channel = self._channels.get(caller.key_id)
            if channel is None or channel.kind != PULL:
                return "ALREADY_DELETED"
            self._pull_gone[caller.key_id] = self._clock.now() + self._pull_gone_s
            await self._remove_locked(channel, "pull channel deleted", GOING_AWAY, "channel deleted")
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
            "events_queued_total": self._counters.events_queued,
            "events_delivered_total": self._counters.events_delivered,
            "dropped_overflow_total": self._counters.dropped_overflow,
            "dropped_expired_total": self._counters.dropped_expired,
            "dropped_failed_total": self._counters.dropped_failed,
            "delivery_failures_total": self._counters.delivery_failures,
            "channels_removed_total": self._counters.channels_removed,
        }


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped by an unexpected error", task.get_name(), exc_info=task.exception())
