"""Edge Core in tests: an in-process EdgeCore against a service node, and a protocol translator speaking raw
JSON-RPC 2.0 frames over the Unix socket the way mbed-edge's translators and management clients do."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from devicehub.clock import Clock
from devicehub.config import EdgeSettings
from devicehub.edge.runner import EdgeCore
from devicehub.node import Node


@contextlib.asynccontextmanager
async def edge_core(
    tmp_path: Path, coap_port: int, *, clock: Clock | None = None, write_timeout: float | None = None, **overrides: Any
) -> AsyncIterator[EdgeCore]:
    defaults: dict[str, Any] = {"server": f"coap://127.0.0.1:{coap_port}", "endpoint_name": "edge-01"}
    settings = EdgeSettings(http_port=0, edge_pt_domain_socket=str(tmp_path / "edge.sock"), **{**defaults, **overrides})
    core = (
        EdgeCore(settings, clock=clock)
        if write_timeout is None
        else EdgeCore(settings, clock, write_timeout=write_timeout)
    )
    await core.start()
    try:
        yield core
    finally:
        await core.stop()


class TranslatorClient:
    """A JSON-RPC 2.0 peer over the Unix socket, as Mbed Edge translators are; it records every frame it gets."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = 0
        self.frames: list[aiohttp.WSMessage] = []  # every frame Edge Core sent, in order
        self.requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()  # what Edge Core asks the translator

    async def receive(self) -> dict[str, Any]:
        frame = await self.ws.receive()
        self.frames.append(frame)
        assert frame.type == aiohttp.WSMsgType.TEXT, frame  # Edge Core sends text frames
        message: dict[str, Any] = msgspec.json.decode(frame.data)
        return message

    async def next_request(self) -> dict[str, Any]:
        """The next request Edge Core sends this translator (a cloud write or execute)."""
        if not self.requests.empty():
            return self.requests.get_nowait()
        message = await asyncio.wait_for(self.receive(), 10)
        assert "method" in message, message
        return message

    async def send(self, message: object) -> None:
        await self.ws.send_str(msgspec.json.encode(message).decode())

    async def answer(self, request: dict[str, Any], result: object = "ok") -> None:
        await self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    async def fail(self, request: dict[str, Any], code: int = -30100, message: str = "device refused") -> None:
        await self.send({"jsonrpc": "2.0", "id": request["id"], "error": {"code": code, "message": message}})

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a request and return the next frame that is not a request of Edge Core's (which must answer it)."""
        self.ids += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.ids, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        while True:
            reply = await asyncio.wait_for(self.receive(), 10)
            if "method" in reply:
                await self.requests.put(reply)
                continue
            assert reply["id"] == self.ids, reply  # an answer to anything else (a response of ours) is a bug
            return reply


def float_objects(temperature: float, oid: int = 3303, operations: int = 1 | 2) -> list[dict[str, Any]]:
    value = base64.b64encode(struct.pack(">d", temperature)).decode()
    resource = {"resourceId": 5700, "operations": operations, "type": "float", "value": value}
    return [{"objectId": oid, "objectInstances": [{"objectInstanceId": 0, "resources": [resource]}]}]


def api_session(node: Node) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        f"http://127.0.0.1:{node.http_port}", headers={"Authorization": f"Bearer {node.dev_api_key}"}
    )


def local_session(tmp_path: Path) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(tmp_path / "edge.sock")))
