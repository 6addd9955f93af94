"""issue 34 #2 on a whole node: a device request's async-response on a cursor channel carries the `device_seq` of
the device it went to, after that device's registration, so the application sees the device's events in one
sequence whichever kind they are."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from support.node import device, run, running_node


async def events(ws: aiohttp.ClientWebSocketResponse, until: str) -> list[dict[str, Any]]:
    """Events of every kind (each tagged with its array's name) until one of kind `until` came."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(10):
        while not any(e["array"] == until for e in seen):
            message = await ws.receive()
            assert message.type == aiohttp.WSMsgType.TEXT, message
            for array, items in json.loads(message.data).items():
                if isinstance(items, list):
                    seen += [{**item, "array": array} for item in items]
    return seen


def test_an_async_response_follows_its_devices_registration_in_the_devices_sequence(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                body = {"serialization": {"cfg": {"include_cursor": True}}}
                async with http.put("/v2/notification/websocket", json=body) as r:
                    assert r.status == 201
                async with http.ws_connect("/v2/notification/websocket-connect") as ws:
                    async with device(node, "seq-1") as sim:
                        (registration,) = [
                            e for e in await events(ws, "registrations") if e["array"] == "registrations"
                        ]
                        body = {"method": "GET", "uri": "/3/0/0"}
                        async with http.post(f"/v2/device-requests/{sim.device_id}?async-id=s-1", json=body) as r:
                            assert r.status == 202
                        seen = await events(ws, "async-responses")
                    answer = next(e for e in seen if e["array"] == "async-responses")
                    assert answer["id"] == "s-1" and answer["status"] == 200
                    assert registration["device_seq"] == 1
                    assert answer["device_seq"] == 2 and answer["cursor"] > registration["cursor"]

    run(scenario())
