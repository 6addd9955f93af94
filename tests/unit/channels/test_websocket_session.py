"""The WebSocket session's timers on the manual clock: frame coalescing, ping interval and pong time-out (spec
§4.7, §7), over a fake socket."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, cast

import msgspec
from aiohttp import WSMsgType
from channel_fakes import FakeSocket, make_channel, push_note

from devicehub.channels.channel import Channel
from devicehub.channels.websocket import WebSocketSession
from devicehub.clock import ManualClock


def session(
    socket: FakeSocket, channel: Channel, clock: ManualClock, *, coalesce: float = 0.0, ping_interval: float = 30.0
) -> WebSocketSession:
    counter = itertools.count(1)
    return WebSocketSession(
        cast(Any, socket),
        channel,
        clock,
        ping_payload=lambda: next(counter).to_bytes(4, "big"),
        ping_interval=ping_interval,
        pong_timeout=5.0,
        coalesce=coalesce,
    )


async def turns(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_the_sender_waits_the_coalescing_time_on_the_clock_and_writes_one_frame() -> None:
    async def main() -> None:
        clock, socket, channel = ManualClock(), FakeSocket(), make_channel()
        running = asyncio.create_task(session(socket, channel, clock, coalesce=0.002).run(lambda s: None))
        await clock.wait_for_sleepers(1)  # the pinger
        push_note(channel, 1)
        await clock.wait_for_sleepers(2)  # and the sender, coalescing
        push_note(channel, 2)
        await turns()
        assert socket.frames == []
        await clock.advance(0.002)
        assert len(socket.frames) == 1
        assert len(msgspec.json.decode(socket.frames[0])["notifications"]) == 2
        await socket.close(code=1000)
        await running

    asyncio.run(main())


def test_a_ping_goes_every_interval_on_the_clock_and_an_echoing_pong_keeps_the_socket() -> None:
    async def main() -> None:
        clock, socket, channel = ManualClock(), FakeSocket(), make_channel()
        running = asyncio.create_task(session(socket, channel, clock).run(lambda s: None))
        await clock.wait_for_sleepers(1)
        await clock.advance(29.9)
        assert socket.pings == []
        await clock.advance(0.1)
        assert socket.pings == [(1).to_bytes(4, "big")]
        socket.client_sends(WSMsgType.PONG, socket.pings[0])
        await turns()
        await clock.advance(30.0)
        assert not socket.closed and socket.pings[1:] == [(2).to_bytes(4, "big")]
        await socket.close(code=1000)
        await running

    asyncio.run(main())


def test_no_echoing_pong_within_the_time_out_on_the_clock_closes_1001() -> None:
    async def main() -> None:
        clock, socket, channel = ManualClock(), FakeSocket(), make_channel()
        ended: list[WebSocketSession] = []
        running = asyncio.create_task(session(socket, channel, clock).run(ended.append))
        await clock.wait_for_sleepers(1)
        await clock.advance(30.0)
        socket.client_sends(WSMsgType.PONG, b"\xff\xff\xff\xff")  # not the ping's bytes (spec §4.7)
        await clock.advance(4.9)
        assert not socket.closed
        await clock.advance(0.1)
        await running
        assert (socket.close_code, socket.close_message) == (1001, b"ping timeout") and len(ended) == 1

    asyncio.run(main())


def test_a_frame_the_socket_fails_to_take_returns_to_the_queue() -> None:
    async def main() -> None:
        clock, socket, channel = ManualClock(), FakeSocket(), make_channel()

        async def refuse(data: bytes, kind: WSMsgType) -> None:
            raise ConnectionResetError("peer gone")

        socket.send_frame = refuse  # type: ignore[method-assign]
        push_note(channel, 1)
        running = asyncio.create_task(session(socket, channel, clock).run(lambda s: None))
        await turns()
        await socket.close(code=1000)
        await running
        assert len(channel.queue) == 1

    asyncio.run(main())
