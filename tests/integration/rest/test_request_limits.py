"""Limits against one abusive client (issue 14 #14): per-key request rate (429 + Retry-After), the header read
time-out against slowloris, and one WebSocket per key however often it connects. Real HTTP on loopback."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import aiohttp
import pytest

from devicehub.clock import ManualClock
from support.apps import create_key
from support.node import run, running_node


def test_requests_beyond_a_keys_rate_are_429_with_retry_after_and_other_keys_go_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock, rate_limit=2.0, rate_limit_burst=3.0) as node:
            other = create_key(str(tmp_path))
            base = f"http://127.0.0.1:{node.http_port}"
            async with aiohttp.ClientSession(base) as http:
                mine = {"Authorization": f"Bearer {node.dev_api_key}"}
                for _ in range(3):
                    async with http.get("/v3/devices", headers=mine) as r:
                        assert r.status == 200
                async with http.get("/v3/devices", headers=mine) as r:
                    assert r.status == 429 and r.headers["Retry-After"] == "1"
                    body = await r.json()
                    assert (body["code"], body["type"]) == (429, "too_many_requests")
                async with http.get("/v2/endpoints", headers=mine) as r:  # v2 areas answer the text token
                    assert (r.status, await r.text()) == (429, "TOO_MANY_REQUESTS")
                async with http.get("/v3/devices", headers={"Authorization": f"Bearer {other}"}) as r:
                    assert r.status == 200  # another key has its own bucket
                await clock.advance(0.5)  # one token back at 2/s
                async with http.get("/v3/devices", headers=mine) as r:
                    assert r.status == 200
                async with http.get("/v3/devices", headers=mine) as r:
                    assert r.status == 429
                # nothing is exempt: requests without a key count against the client address
                statuses = []
                for _ in range(4):
                    async with http.get("/health") as r:
                        statuses.append(r.status)
                assert statuses == [200, 200, 200, 429]

    run(scenario())


def test_a_keys_rest_calls_and_websocket_connects_share_one_bucket(tmp_path: Path) -> None:
    """The key in a `pelion_<key>` sub-protocol is the same key as in the bearer header: one bucket, not two."""

    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock, rate_limit=1.0, rate_limit_burst=3.0) as node:
            key = node.dev_api_key
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as http:
                async with http.put("/v2/notification/websocket", headers={"Authorization": f"Bearer {key}"}) as r:
                    assert r.status == 201
                ws = await http.ws_connect("/v2/notification/websocket-connect", protocols=("wss", f"pelion_{key}"))
                async with http.get("/v3/devices", headers={"Authorization": f"Bearer {key}"}) as r:
                    assert r.status == 200  # the third token of three
                async with http.get("/v3/devices", headers={"Authorization": f"Bearer {key}"}) as r:
                    assert r.status == 429
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await http.ws_connect("/v2/notification/websocket-connect", protocols=("wss", f"pelion_{key}"))
                assert refused.value.status == 429
                # a made-up sub-protocol beside the key does not open a fresh bucket either
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await http.ws_connect(
                        "/v2/notification/websocket-connect", protocols=("made-up", "wss", f"pelion_{key}")
                    )
                assert refused.value.status == 429
                await ws.close()

    run(scenario())


def test_made_up_keys_from_one_address_share_the_address_bucket(tmp_path: Path) -> None:
    """A fresh random bearer token on each request is no fresh bucket: keys that do not authenticate count against
    the client's address, while a real key from the same address keeps its own bucket."""

    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock, rate_limit=1.0, rate_limit_burst=3.0) as node:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as http:
                statuses = []
                for _ in range(5):
                    made_up = {"Authorization": f"Bearer ak_{secrets.token_hex(16)}"}
                    async with http.get("/v3/devices", headers=made_up) as r:
                        statuses.append(r.status)
                assert statuses == [401, 401, 401, 429, 429]
                async with http.get("/health") as r:  # no key at all: the same address bucket
                    assert r.status == 429
                async with http.get("/v3/devices", headers={"Authorization": f"Bearer {node.dev_api_key}"}) as r:
                    assert r.status == 200

    run(scenario())


def test_half_sent_request_heads_are_closed_after_the_header_timeout(tmp_path: Path) -> None:
    """2 000 half-sent requests stayed open 122 s (slowloris). Each connection here sends part of a head and then
    trickles a header line; the node closes every one after the time-out, while a whole request is answered."""

    async def scenario() -> None:
        async with running_node(tmp_path, http_header_timeout=0.5) as node:
            loop = asyncio.get_running_loop()
            started = loop.time()
            conns = [await asyncio.open_connection("127.0.0.1", node.http_port) for _ in range(50)]
            for _, writer in conns:
                writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            await asyncio.gather(*(w.drain() for _, w in conns))
            for _, writer in conns[:10]:  # still sending, slowly: no extension of the deadline
                writer.write(b"X-Slow: 1\r\n")
            reader, writer = await asyncio.open_connection("127.0.0.1", node.http_port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 200")
            writer.close()
            for reader, writer in conns:
                assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the node, nothing answered
                writer.close()
            assert loop.time() - started < 5

    run(scenario())


def test_a_key_has_one_websocket_however_often_it_connects(tmp_path: Path) -> None:
    """Each connect closes the previous socket with 1001 (service-spec §7): 20 connects leave one open socket."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.put("/v2/notification/websocket") as r:
                    assert r.status == 201
                sockets = [await http.ws_connect("/v2/notification/websocket-connect") for _ in range(20)]
                for ws in sockets[:-1]:
                    frame = await asyncio.wait_for(ws.receive(), 5)
                    assert frame.type == aiohttp.WSMsgType.CLOSE and frame.data == 1001
                assert not sockets[-1].closed
                assert node.hub.metrics()["websockets_connected"] == 1
                for ws in sockets:
                    await ws.close()

    run(scenario())
