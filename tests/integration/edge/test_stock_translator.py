"""A protocol translator nobody on this project wrote: jsonrpc-websocket (a stock JSON-RPC 2.0 WebSocket client on
aiohttp) over the Unix socket, through register, cloud writes answered ok and with an error, management read and
write, a value update and unregister; no frame Edge Core sends answers a response (issue 11, item 9)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import struct
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from jsonrpc_base import ProtocolError
from jsonrpc_websocket import Server

from support.apps import EventReader
from support.edge import api_session, edge_core, float_objects
from support.node import run, running_node


def _counting_session(socket_path: Path, frames: list[dict[str, Any]]) -> aiohttp.ClientSession:
    """An aiohttp session whose WebSockets record every frame they receive (the library reads through it)."""

    class Counting(aiohttp.ClientWebSocketResponse):
        async def receive(self, timeout: float | None = None) -> aiohttp.WSMessage:
            message = await super().receive(timeout)
            if message.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                assert message.type == aiohttp.WSMsgType.TEXT, message  # Edge Core sends text frames
                frames.append(json.loads(message.data))
            return message

    return aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(socket_path)), ws_response_class=Counting)


def _double(value: float) -> str:
    return base64.b64encode(struct.pack(">d", value)).decode()


def test_stock_jsonrpc_translator_round_trip_and_no_answer_to_a_response(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port):
            pt_frames: list[dict[str, Any]] = []
            mgmt_frames: list[dict[str, Any]] = []
            socket_path = tmp_path / "edge.sock"
            async with (
                _counting_session(socket_path, pt_frames) as pt_session,
                _counting_session(socket_path, mgmt_frames) as mgmt_session,
                api_session(node) as http,
            ):
                translator = Server("ws://edge/1/pt", session=pt_session, timeout=10)
                verdicts: asyncio.Queue[bool] = asyncio.Queue()  # how the translator answers each write
                writes: list[dict[str, Any]] = []

                async def write(uri: dict[str, int], operation: int, value: str) -> str:
                    writes.append({"uri": uri, "operation": operation, "value": value})
                    if not await verdicts.get():
                        raise RuntimeError("the device refused")  # the library answers a JSON-RPC error object
                    return "ok"

                translator.write = write  # Edge Core's requests named `write` land here
                reader = await translator.ws_connect()
                calls = 0

                assert await translator.protocol_translator_register(name="stock-pt") == "ok"
                objects = float_objects(20.0)
                assert await translator.device_register(deviceId="stock-1", lifetime=300, objects=objects) == "ok"
                calls += 2
                async with http.get("/v3/devices") as r:
                    child_id = next(d["id"] for d in (await r.json())["data"] if d["endpoint_name"] == "stock-1")
                async with http.put("/v2/notification/websocket") as r:
                    assert r.status == 201
                events = EventReader(await http.ws_connect("/v2/notification/websocket-connect"))

                for async_id, verdict, status in (("ok", True, 200), ("refused", False, 500)):
                    await verdicts.put(verdict)
                    body = {"method": "PUT", "uri": "/3303/0/5700", "payload-b64": base64.b64encode(b"18.5").decode()}
                    async with http.post(f"/v2/device-requests/{child_id}?async-id={async_id}", json=body) as r:
                        assert r.status == 202
                    response = await events.wait_for("async-responses", lambda e, a=async_id: e["id"] == a)
                    assert response["status"] == status, response
                assert [w["value"] for w in writes] == [_double(18.5), _double(18.5)]

                manager = Server("ws://edge/1/mgmt", session=mgmt_session, timeout=10)
                manager_reader = await manager.ws_connect()
                where = {"endpointName": "stock-1", "uri": "/3303/0/5700"}
                read = await manager.read_resource(**where)
                assert read == {"base64Value": _double(18.5), "stringValue": "18.5", "type": "float"}
                await verdicts.put(True)
                assert await manager.write_resource(**where, base64Value=_double(16.0)) == "ok"
                await verdicts.put(False)
                with pytest.raises(ProtocolError) as refused:
                    await manager.write_resource(**where, base64Value=_double(1.0))
                assert refused.value.args[0] == -30106
                assert (await manager.read_resource(**where))["base64Value"] == _double(16.0)
                assert len(writes) == 4

                assert await translator.write(deviceId="stock-1", objects=float_objects(15.0)) == "ok"
                assert await translator.device_unregister(deviceId="stock-1") == "ok"
                calls += 2
                await events.wait_for("de-registrations", lambda e: e == child_id)

                # what the translator got: Edge Core's 4 writes and one answer per call of its own, nothing more; a
                # frame answering one of the translator's responses would have come before the last call's answer
                requests = [f for f in pt_frames if "method" in f]
                answers = [f for f in pt_frames if "method" not in f]
                assert [f["method"] for f in requests] == ["write"] * 4
                assert len(answers) == calls and all("result" in f for f in answers)
                edge_ids = {f["id"] for f in requests}
                assert not [f for f in answers if f["id"] in edge_ids]
                assert len(mgmt_frames) == 4 and all("method" not in f for f in mgmt_frames)

                for server, task in ((manager, manager_reader), (translator, reader)):
                    await server.close()
                    with contextlib.suppress(Exception):
                        await task
                await events.ws.close()

    run(scenario())
