"""Logs a person can follow (issue 17 §4): one INFO line per lifecycle event, request ids, no tracebacks for
bad client input."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest

from support.node import device, run, running_node
from support.waiting import eventually


def messages(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_registration_deregistration_and_websocket_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with device(node, "logged-1") as sim:
                    device_id = sim.device_id
                    async with http.put("/v2/notification/websocket") as r:
                        assert r.status in (200, 201)
                    ws = await http.ws_connect("/v2/notification/websocket-connect")
                    await eventually(lambda: any("connected" in m for m in messages(caplog)))
                    await ws.close()
                    await eventually(lambda: any("disconnected" in m for m in messages(caplog)))
                    async with http.delete("/v2/notification/websocket") as r:
                        assert r.status == 204
                await eventually(lambda: any(m.startswith("de-registered logged-1") for m in messages(caplog)))
        info = messages(caplog)
        assert sum(m.startswith(f"registered logged-1 ({device_id}) from 127.0.0.1:") for m in info) == 1
        assert sum(m == f"de-registered logged-1 ({device_id})" for m in info) == 1
        assert sum(m.startswith("websocket of key ") and m.endswith(" connected") for m in info) == 1
        assert sum(m.startswith("websocket of key ") and m.endswith(" disconnected") for m in info) == 1
        assert sum(m.startswith("channel of key ") and "removed" in m for m in info) == 1

    run(scenario())


def test_malformed_http_is_one_info_line_not_an_error_with_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            for raw in (
                b"GARBAGE \x00\x01 HTTP/9\r\n\r\n",
                b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
            ):
                reader, writer = await asyncio.open_connection("127.0.0.1", node.http_port)
                writer.write(raw)
                await writer.drain()
                assert (await reader.read(12)).startswith(b"HTTP/1.0 400")
                writer.close()
                await writer.wait_closed()
            await eventually(lambda: len([m for m in messages(caplog) if m.startswith("bad request")]) == 2)

    run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    lines = [m for m in messages(caplog) if m.startswith("bad request from a client")]
    assert "BadHttpMethod" in lines[0] and "Content-Length" in lines[1]


def test_request_id_is_the_same_in_the_header_the_error_body_and_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="devicehub.api.access")

    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.get("/v3/devices/missing", headers={"X-Request-Id": "trace-17"}) as r:
                    assert r.status == 404 and r.headers["X-Request-Id"] == "trace-17"
                    assert (await r.json())["request_id"] == "trace-17"
                async with http.get("/v3/devices") as r:
                    generated = r.headers["X-Request-Id"]
                    assert len(generated) == 32 and int(generated, 16) >= 0
                async with http.get("/v3/devices") as r:  # each request its own id
                    assert r.headers["X-Request-Id"] != generated and len(r.headers["X-Request-Id"]) == 32

    run(scenario())
    access = [r for r in caplog.records if r.name == "devicehub.api.access"]
    assert any(r.getMessage().startswith("GET /v3/devices/missing 404 ") for r in access)
