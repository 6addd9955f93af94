"""Channels for unit tests of the hub's parts: real queues, a journal whose store is never reached, and fakes of
the ports around them (no sockets, a manual clock)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiohttp import WSMessage, WSMsgType

from devicehub.channels.channel import Channel, Counters
from devicehub.channels.encode import EventEncoder
from devicehub.channels.journal import Journal
from devicehub.channels.options import ChannelOptions
from devicehub.domain.events import NotificationEvent
from devicehub.domain.model import ChannelConfig

START = 1_800_000_000.0  # ManualClock's start


class Unreachable:
    """A store the test must not reach: the journal only buffers in memory until a flush, which no test runs."""


def make_channel(
    key_id: str = "k1",
    kind: str = "websocket",
    *,
    account_id: str = "a1",
    options: ChannelOptions | None = None,
    now: float = START,
    counters: Counters | None = None,
) -> Channel:
    config = ChannelConfig(
        key_id=key_id,
        account_id=account_id,
        kind=kind,
        serialization=(options or ChannelOptions()).to_wire(),
        created_at=now,
    )
    journal = Journal(cast(Any, Unreachable()), 1.0)
    return Channel(config, journal, counters or Counters(), now)


def note(n: int) -> NotificationEvent:
    return NotificationEvent(
        device_id="d" * 32,
        endpoint_name="node-1",
        path="/3303/0/5700",
        content_type="text/plain",
        payload=str(n).encode(),
    )


def push_note(channel: Channel, n: int, now_ms: int = int(START * 1000)) -> None:
    """Queue notification `n` as the publish path would."""
    event = note(n)
    channel.push(event.kind, EventEncoder().encode(event, channel.options, now_ms, None), now_ms)


class Removals:
    """The sweeper's and the deliverer's port: remove a channel, saying why."""

    def __init__(self) -> None:
        self.removed: list[tuple[str, str]] = []

    async def __call__(self, channel: Channel, reason: str) -> None:
        self.removed.append((channel.key_id, reason))


class FakeSession:
    """A bound socket as the sweeper sees it (channel.py's Session)."""

    def __init__(self, last_activity: float) -> None:
        self.last_activity = last_activity
        self.closed_with: tuple[int, str] | None = None

    async def close(self, code: int, reason: str) -> None:
        self.closed_with = (code, reason)


class FakeSocket:
    """The aiohttp WebSocketResponse surface a WebSocketSession uses: frames and pings recorded, the client's
    messages fed in by the test."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.pings: list[bytes] = []
        self.closed = False
        self.close_code: int | None = None
        self.close_message = b""
        self._incoming: asyncio.Queue[WSMessage | None] = asyncio.Queue()

    def client_sends(self, kind: WSMsgType, data: Any) -> None:
        self._incoming.put_nowait(WSMessage(kind, data, None))

    async def send_frame(self, data: bytes, kind: WSMsgType) -> None:
        self.frames.append(data)

    async def ping(self, payload: bytes) -> None:
        self.pings.append(payload)

    async def pong(self, payload: bytes) -> None:
        pass

    async def close(self, *, code: int, message: bytes = b"") -> bool:
        if not self.closed:
            self.closed, self.close_code, self.close_message = True, code, message
            self._incoming.put_nowait(None)
        return True

    def __aiter__(self) -> FakeSocket:
        return self

    async def __anext__(self) -> WSMessage:
        message = await self._incoming.get()
        if message is None:
            raise StopAsyncIteration
        return message
