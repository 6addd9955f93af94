"""WebSocket channels (spec §4.7, §5 rule 3, §7): the key in the handshake, and the session that pushes and pings.

Ping interval, pong time-out and the frame coalescing wait are constructor parameters of the hub (not spec timers:
the spec says only "a few seconds"); they run on the injected clock, as the sweeper's 24 h inactivity rule does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiohttp import WSMsgType, web

from devicehub.channels.channel import Outbox
from devicehub.clock import Clock
from devicehub.errors import DevicehubError

log = logging.getLogger("devicehub.channels.websocket")

SUBPROTOCOL = "wss"  # wire-format.md: the server answers `Sec-WebSocket-Protocol: wss`
KEY_PREFIX = "pelion_"  # spec §4.7: a fixed service prefix and the API key

# seconds a sender woken by the first event of an empty queue waits for more before it writes the frame: each
# text frame is one NotificationMessage of up to max_chunk_size events (wire-format.md), and a frame per loop
# turn cost more CPU than the events in it (issue 15; bench/README.md, "Events")
COALESCE_S = 0.002

# spec §7 close codes
NORMAL = 1000
GOING_AWAY = 1001
POLICY_VIOLATION = 1008
UNEXPECTED = 1011


class UpgradeRequired(DevicehubError):
    """GET /v2/notification/websocket-connect is a WebSocket upgrade."""

    status = 426
    token = "UPGRADE_REQUIRED"
    type = "upgrade_required"


def key_from_protocols(header: str) -> str | None:
    """The API key among the offered sub-protocols (`wss`, `pelion_<key>`, either order)."""
    for item in header.split(","):
        item = item.strip()
        if item.startswith(KEY_PREFIX) and len(item) > len(KEY_PREFIX):
            return item[len(KEY_PREFIX) :]
    return None


class WebSocketSession:
    """One open socket bound to a channel: a reader (pongs, client close), a sender and a pinger."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        channel: Outbox,
        clock: Clock,
        *,
        ping_payload: Callable[[], bytes],
        ping_interval: float,
        pong_timeout: float,
        coalesce: float = COALESCE_S,
    ) -> None:
        self.ws = ws
        self.channel = channel
        self.last_activity = clock.now()
        self._clock = clock
        self._ping_payload = ping_payload
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self._coalesce = coalesce
        self._expected: bytes | None = None
        self._pong = asyncio.Event()
        self._closer: asyncio.Task[bool] | None = None
        self._finished = asyncio.Event()

    async def run(self, on_end: Callable[[WebSocketSession], None]) -> None:
        """Serve the socket until either side closes it; `on_end` runs once it is over."""
        helpers = (
            asyncio.create_task(self._send_loop(), name=f"ws-send-{self.channel.key_id}"),
            asyncio.create_task(self._ping_loop(), name=f"ws-ping-{self.channel.key_id}"),
        )
        try:
            await self._read_loop()
        finally:
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            if self._closer is not None:
                await asyncio.gather(self._closer, return_exceptions=True)
            elif not self.ws.closed:
                await self.ws.close(code=UNEXPECTED, message=b"unexpected end of the session")
            on_end(self)
            self._finished.set()

    async def close(self, code: int, reason: str) -> None:
        """Close from the server side and wait until the session is over (the batch that was out is back)."""
        if self._closer is None:
            self._closer = asyncio.create_task(self.ws.close(code=code, message=reason.encode()))
        with contextlib.suppress(Exception):
            await asyncio.shield(self._closer)
        await self._finished.wait()

    async def _read_loop(self) -> None:
        async for message in self.ws:  # ends on the client's close (answered with 1000 by aiohttp) or ours
            if message.type is WSMsgType.PING:
                await self.ws.pong(message.data)
            elif message.type is WSMsgType.PONG:
                # spec §4.7: the pong must echo the four bytes of our ping
                if self._expected is not None and message.data == self._expected:
                    self._pong.set()
            elif message.type is WSMsgType.ERROR:
                log.info("socket of key %s failed: %s", self.channel.key_id, message.data)
                return
            else:
                self.last_activity = self._clock.now()

    async def _send_loop(self) -> None:
        channel = self.channel
        while not channel.closed and not self.ws.closed:
            batch = channel.take(int(self._clock.now() * 1000))
            if batch is None:
                await channel.wait_for_events()
                if self._coalesce > 0:
                    # issue 15: the events of the next loop turns join this frame (a frame written per loop turn
                    # cost more CPU than its events; a queue that is behind is sent at once, without this wait)
                    await self._clock.sleep(self._coalesce)
                continue
            try:
                pause = channel.pace(batch.count, self._clock.now())  # issue 34 #4: the channel's events a second
                if pause > 0:
                    await self._clock.sleep(pause)
                # spec §6 rule 6: no application acknowledgement; the transport taking the frame is delivery
                await self.ws.send_frame(channel.body(batch), WSMsgType.TEXT)
            except BaseException:
                channel.give_back(batch)
                raise
            channel.delivered(batch, self._clock.now())
            self.last_activity = self._clock.now()

    async def _ping_loop(self) -> None:
        while not self.ws.closed:
            await self._clock.sleep(self._ping_interval)
            payload = self._ping_payload()
            self._expected = payload
            self._pong.clear()
            try:
                await self.ws.ping(payload)
            except (ConnectionError, RuntimeError):
                return
            if not await self._pong_in_time():
                log.info("socket of key %s: no pong echoing the ping; closing", self.channel.key_id)
                await self.close(GOING_AWAY, "ping timeout")  # spec §4.7, §7
                return

    async def _pong_in_time(self) -> bool:
        """Whether the echoing pong arrives within the pong time-out (clock seconds)."""
        pong = asyncio.ensure_future(self._pong.wait())
        timer = asyncio.ensure_future(self._clock.sleep(self._pong_timeout))
        try:
            await asyncio.wait((pong, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pong, timer):
                task.cancel()
            await asyncio.gather(pong, timer, return_exceptions=True)
        return self._pong.is_set()
