"""issue 34 #4: a callback receiver answering 410 Gone (with `remove_on_gone`) removes the channel, and the removal
is said where an application and an operator look: a `channel-removed` line on the account's console feed, and
`GET /v2/notification/channel?include=status` (a 404 whose JSON says what was removed, when and why) until the key
registers a channel again, and `devicehub channels`; the plain Pelion GET stays a bare 404."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from support.node import device, run, running_node


@contextlib.asynccontextmanager
async def gone_receiver() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A callback URL that verifies the registration (200 to its empty PUT), then answers 410 Gone."""
    bodies: list[bytes] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        bodies.append(body)
        return web.Response(status=200 if body == b"{}" else 410)

    app = web.Application()
    app.router.add_put("/cb", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/cb", bodies
    finally:
        await runner.cleanup()


async def next_line(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            message = await ws.receive()
            assert message.type == aiohttp.WSMsgType.TEXT, message
            for line in json.loads(message.data):
                if line["kind"] == kind:
                    return dict(line)


def test_a_410_removal_is_said_on_the_console_feed_and_by_the_channel_status(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            gone_receiver() as (url, bodies),
            running_node(tmp_path, callback_allow="127.0.0.0/8") as node,
        ):
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                body = {"url": url, "delivery": {"remove_on_gone": True}}
                async with http.put("/v2/notification/callback", json=body) as r:
                    assert r.status == 204, await r.text()
                async with http.ws_connect("/v3/console/feed") as ws:
                    async with device(node, "gone-1"):  # its registration goes to the callback: 410
                        line = await next_line(ws, "channel-removed")
                assert len(bodies) >= 2 and b"registrations" in bodies[1]
                removed = line["removed"]
                assert (removed["kind"], removed["url"], removed["cause"]) == ("callback", url, "gone")
                assert "410" in removed["reason"] and removed["removed_at"].endswith("Z")

                async with http.get("/v2/notification/channel") as r:  # Pelion's answer is unchanged
                    assert r.status == 404
                async with http.get("/v2/notification/channel", params={"include": "status"}) as r:
                    assert r.status == 404
                    assert (await r.json())["removed"] == removed

                # the operator's command says it too (exit 1: no channel)
                command = [sys.executable, "-m", "devicehub", "channels", "--api-key", node.dev_api_key]
                command += ["--url", f"http://127.0.0.1:{node.http_port}"]
                process = await asyncio.create_subprocess_exec(
                    *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(os.environ)
                )
                _, err = await process.communicate()
                assert process.returncode == 1
                assert "removed cause: gone" in err.decode().splitlines()

                # registering again clears it: the key has a channel
                async with http.put("/v2/notification/websocket") as r:
                    assert r.status == 201
                async with http.get("/v2/notification/channel", params={"include": "status"}) as r:
                    assert r.status == 200 and "removed" not in await r.json()

    run(scenario())
