"""The channels' time rules (spec §3.3, §8, wire-format.md), applied every `interval` clock seconds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from devicehub import tasks
from devicehub.channels import callback
from devicehub.channels.channel import CALLBACK, PULL, WEBSOCKET, Channel
from devicehub.channels.registry import ChannelRegistry
from devicehub.channels.websocket import GOING_AWAY
from devicehub.clock import Clock
from devicehub.outages import OutageLog

log = logging.getLogger("devicehub.channels")

IDLE_TIMEOUT_S = 48 * 3600.0  # spec §3.3, §8: no data for 48 hours → removed
DISCONNECTED_TIMEOUT_S = 24 * 3600.0  # spec §3.3: a closed WebSocket not reconnected within 24 hours → removed
INACTIVITY_TIMEOUT_S = 24 * 3600.0  # spec §8: the server closes a socket inactive for 24 hours
UNPOLLED_TIMEOUT_S = 600.0  # wire-format.md: a pull channel not polled for 10 min is removed

Remove = Callable[[Channel, str], Awaitable[None]]


def removal_reason(channel: Channel, now: float) -> str | None:
    """Why the channel goes now, or None while no time rule removes it."""
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


class Sweeper:
    """Expires old events, removes idle channels and closes inactive sockets, on the clock."""

    def __init__(
        self,
        registry: ChannelRegistry,
        clock: Clock,
        remove: Remove,
        interval: float,
        *,
        forget_gone: Callable[[float], None] = lambda now: None,
    ) -> None:
        self._registry = registry
        self._clock = clock
        self._remove = remove
        self._interval = interval
        self._forget_gone = forget_gone
        self._task: asyncio.Task[None] | None = None
        self._outage = OutageLog(log, "channel sweep", clock.now)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="channel-sweeper")

    async def stop(self) -> None:
        if self._task is not None:
            await tasks.stop(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._clock.sleep(self._interval)
            try:
                await self.sweep()
            except Exception as error:
                self._outage.failed(error)
            else:
                self._outage.worked()

    async def sweep(self) -> None:
        """Apply the time rules once: event lifetime, idle and disconnected channels, inactive sockets."""
        now = self._clock.now()
        self._forget_gone(now)
        for channel in self._registry.channels():
            channel.expire(int(now * 1000))  # spec §8: events older than 24 hours are removed
            reason = removal_reason(channel, now)
            if reason is not None:
                await self._remove(channel, reason)
            elif channel.session is not None and now - channel.session.last_activity >= INACTIVITY_TIMEOUT_S:
                await channel.session.close(GOING_AWAY, "inactivity")  # spec §3.3, §8
