"""The deprecated pull channel (spec §4.8): the long poll on the clock, and DELETE then 410 for a while."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import msgspec

from devicehub.channels.channel import PULL, Channel
from devicehub.channels.lifecycle import ChannelLifecycle
from devicehub.channels.options import ChannelOptions
from devicehub.channels.registry import ChannelRegistry
from devicehub.channels.websocket import GOING_AWAY
from devicehub.clock import Clock
from devicehub.domain.accounts import Principal
from devicehub.errors import BadRequest, Conflict, Gone

Send = Callable[[bytes], Awaitable[None]]


async def long_poll(channel: Channel, clock: Clock, timeout: float, send: Send, cursor: int | None = None) -> bool:
    """`send` the channel's next batch at once or when one arrives; False after `timeout` clock seconds (or when
    the channel's transport goes away meanwhile). With `cursor`, the events after it are queued again first."""
    if channel.polling:
        raise Conflict("a pull request is already waiting", token="CONCURRENT_PULL_REQUEST_RECEIVED")
    if cursor is not None:
        channel.rewind(cursor, int(clock.now() * 1000))  # no batch is out between polls
    channel.polling = True
    channel.poll_idle.clear()
    channel.last_polled_at = clock.now()
    try:
        batch = channel.take(int(clock.now() * 1000))
        if batch is None:
            await _events_within(channel, clock, timeout)
            if channel.closed or channel.stopping:
                return False
            batch = channel.take(int(clock.now() * 1000))
            if batch is None:
                return False
        try:
            await send(channel.body(batch))
        except BaseException:
            channel.give_back(batch)
            raise
        channel.delivered(batch, clock.now())
        return True
    finally:
        channel.polling = False
        channel.poll_idle.set()
        channel.last_polled_at = clock.now()


async def _events_within(channel: Channel, clock: Clock, timeout: float) -> None:
    events = asyncio.ensure_future(channel.wait_for_events())
    timer = asyncio.ensure_future(clock.sleep(timeout))
    try:
        await asyncio.wait((events, timer), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (events, timer):
            task.cancel()
        await asyncio.gather(events, timer, return_exceptions=True)


class PullChannels:
    """GET creates the key's pull channel and polls it; DELETE removes it, and GET answers 410 for `gone_s`."""

    def __init__(
        self, lifecycle: ChannelLifecycle, registry: ChannelRegistry, clock: Clock, *, timeout: float, gone_s: float
    ) -> None:
        self._lifecycle = lifecycle
        self._registry = registry
        self._clock = clock
        self._timeout = timeout
        self._gone_s = gone_s
        self._gone: dict[str, float] = {}  # key → until when GET pull answers 410

    async def pull(self, caller: Principal, send: Send, cursor: int | None = None) -> bool:
        """Long poll: `send` the next batch at once or when one arrives; False after the poll time-out."""
        channel = await self._channel(caller, cursors=cursor is not None)
        return await long_poll(channel, self._clock, self._timeout, send, cursor)

    async def _channel(self, caller: Principal, *, cursors: bool) -> Channel:
        """The key's pull channel, made on the first GET; a GET with `?cursor=` opts it into cursors (issue 34
        #1: a pull channel has no registration body to ask for them in)."""
        channel = await self._pull_channel(caller)
        if cursors and not channel.options.include_cursor:
            async with self._lifecycle.lock:
                options = msgspec.structs.replace(channel.options, include_cursor=True)
                config = msgspec.structs.replace(channel.config, serialization=options.to_wire())
                await self._lifecycle.store.put_channel(config)
                channel.reconfigure(config)  # no batch is out between polls: cursors start at once
            if self._lifecycle.ownership is not None:
                await self._lifecycle.ownership.changed(caller.key_id)  # other nodes encode for the new options
        return channel

    async def _pull_channel(self, caller: Principal) -> Channel:
        lifecycle = self._lifecycle
        if lifecycle.ownership is not None and caller.key_id not in self._registry:
            config = await lifecycle.store.get_channel(caller.key_id)
            if config is not None and config.kind == PULL:
                owned = await lifecycle.ownership.own(caller.key_id, take_over=True)
                if owned is not None:
                    return owned
        async with lifecycle.lock:
            channel = self._registry.get(caller.key_id)
            if channel is not None and channel.kind != PULL:
                raise BadRequest(f"the key has a {channel.kind} channel", token="NOTIFICATION_CHANNEL_EXISTS")
            if channel is not None:
                return channel
            if self._gone.get(caller.key_id, 0.0) > self._clock.now():
                raise Gone("the pull channel was deleted", token="CHANNEL_DELETED")
            return await lifecycle.install(lifecycle.config(caller, PULL, ChannelOptions()))

    async def delete(self, caller: Principal) -> str:
        """`REMOVED`, or `ALREADY_DELETED` when the key has no pull channel (a 2xx either way)."""
        lifecycle = self._lifecycle
        if lifecycle.ownership is not None and caller.key_id not in self._registry:
            deleted = await lifecycle.delete_elsewhere(caller.key_id, PULL)
            if deleted:
                self._gone[caller.key_id] = self._clock.now() + self._gone_s
            return "REMOVED" if deleted else "ALREADY_DELETED"
        async with lifecycle.lock:
            channel = self._registry.get(caller.key_id)
            if channel is None or channel.kind != PULL:
                return "ALREADY_DELETED"
            self._gone[caller.key_id] = self._clock.now() + self._gone_s
            await lifecycle.remove_locked(channel, "pull channel deleted", GOING_AWAY, "channel deleted")
        if lifecycle.ownership is not None:
            await lifecycle.ownership.drop_inbox(caller.key_id)
            await lifecycle.ownership.changed(caller.key_id, "deleted")
        return "REMOVED"

    def forget_gone(self, now: float) -> None:
        """The sweeper's: keys whose 410 time is over may create a pull channel again."""
        for key, until in list(self._gone.items()):
            if until <= now:
                del self._gone[key]
