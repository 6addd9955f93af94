"""An error raised after a response began is not answered with a second response inside the first
(api/streamed_errors.py).

A WebSocket route that fails after its 101 ends the socket with a close frame, 1011 and the error's token (spec §7):
the error response the edge wrote there before was read by the client as a frame header ("HTTP/1.1 503": RSV1 set,
RFC 6455 §5.2), test_cluster_front's intermittent "non-zero reserved bits". A streamed body that fails half-way is cut
(the connection dropped), so the client sees a short body, never an error document appended to the bytes it read.
The routes run behind the real API edge middleware on a real server (the suite's loop is uvloop, as the CLI's)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import WSCloseCode, web

from devicehub.api.edge import edge_middleware
from devicehub.api.rate_limit import RATE_LIMITS
from devicehub.api.streamed_errors import upgrade
from devicehub.clock import SystemClock
from devicehub.errors import StorageUnavailable
from devicehub.ratelimit import TokenBuckets

BODY = 64 * 1024  # declared length of the streamed body; half of it is written before the failure


async def _socket_then_typed_error(request: web.Request) -> web.StreamResponse:
    ws = web.WebSocketResponse()
    await upgrade(request, ws)
    raise StorageUnavailable("the store does not answer; retry later")


async def _socket_then_bug(request: web.Request) -> web.StreamResponse:
    ws = web.WebSocketResponse()
    await upgrade(request, ws)
    raise RuntimeError("a bug")


async def _stream_then_error(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    response.content_length = BODY
    await response.prepare(request)
    await response.write(b"x" * (BODY // 2))
    raise StorageUnavailable("the store does not answer; retry later")


async def _plain_error(request: web.Request) -> web.StreamResponse:
    raise StorageUnavailable("the store does not answer; retry later")


async def _serve(scenario: Callable[[aiohttp.ClientSession], Awaitable[None]]) -> None:
    app = web.Application(middlewares=[edge_middleware(lambda request, status, started: None)])
    app[RATE_LIMITS] = TokenBuckets(SystemClock(), 0, 0)  # no limit: the edge asks its buckets first
    app.router.add_get("/socket-typed", _socket_then_typed_error)
    app.router.add_get("/socket-bug", _socket_then_bug)
    app.router.add_get("/stream", _stream_then_error)
    app.router.add_get("/plain", _plain_error)
    runner = web.AppRunner(app)
    await runner.setup()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            await scenario(http)
    finally:
        await runner.cleanup()


def test_a_socket_failing_after_its_upgrade_is_closed_1011_with_the_error_token() -> None:
    async def scenario(http: aiohttp.ClientSession) -> None:
        for path, reason in (("/socket-typed", "STORAGE_UNAVAILABLE: "), ("/socket-bug", "INTERNAL_ERROR")):
            ws = await http.ws_connect(path)
            message = await ws.receive(timeout=10)
            assert message.type is aiohttp.WSMsgType.CLOSE, message  # before: ERROR, non-zero reserved bits
            assert message.data == WSCloseCode.INTERNAL_ERROR
            assert message.extra.startswith(reason), message.extra
            await ws.close()

    asyncio.run(_serve(scenario))


def test_a_streamed_body_failing_half_way_is_cut_not_followed_by_an_error_document() -> None:
    async def scenario(http: aiohttp.ClientSession) -> None:
        async with http.get("/stream") as r:
            assert r.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(r.read(), 10)  # before: the error document read as body bytes, then a hang
        async with http.get("/plain") as r:  # no response begun: the edge's error document, as ever
            assert r.status == 503
            assert await r.text() == "STORAGE_UNAVAILABLE"

    asyncio.run(_serve(scenario))
