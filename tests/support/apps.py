"""An application's view of devicehub in tests: an HTTP session with a key and a WebSocket event reader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from devicehub.node import Node

Message = dict[str, Any]


class EventReader:
    """Reads NotificationMessages from a channel WebSocket and waits for the events a test expects."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.messages: list[Message] = []

    def events(self, kind: str) -> list[Any]:
        return [event for message in self.messages for event in message.get(kind, [])]

    async def wait_for(self, kind: str, predicate: Callable[[Any], bool], timeout: float = 15.0) -> Any:
        async def scan() -> Any:
            while True:
                for event in self.events(kind):
                    if predicate(event):
                        return event
                frame = await self.ws.receive()
                if frame.type != aiohttp.WSMsgType.TEXT:
                    raise AssertionError(f"socket ended while waiting for {kind}: {frame}")
                self.messages.append(json.loads(frame.data))

        return await asyncio.wait_for(scan(), timeout)


def create_key(data_dir: str, account: str = "development") -> str:
    """A second key through the real admin command (its last output line is the key)."""
    out = subprocess.run(
        [sys.executable, "-m", "devicehub", "keys", "create", "--account", account, "--data-dir", data_dir],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def simulator(server_uri: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "devicehub", "simulate", "--server", server_uri, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stderr is not None:
        process.stderr.close()


@contextlib.asynccontextmanager
async def websocket_app(node: Node, key: str | None = None) -> AsyncIterator[tuple[aiohttp.ClientSession, EventReader]]:
    """An application of `node`: an HTTP session with its key (the dev key by default) and its WebSocket channel,
    connected."""
    headers = {"Authorization": f"Bearer {key or node.dev_api_key}"}
    async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
        async with http.put("/v2/notification/websocket") as r:
            assert r.status in (200, 201)
        ws = await http.ws_connect("/v2/notification/websocket-connect")
        try:
            yield http, EventReader(ws)
        finally:
            await ws.close()
