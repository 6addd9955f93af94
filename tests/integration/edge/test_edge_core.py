"""Edge Core against a real service on loopback (issue 7): its status follows the real connection; the status API
answers 200/400/404/405; child devices added by a protocol translator live upstream as their own endpoints."""

from __future__ import annotations

import asyncio
import base64
import socket
import struct
from pathlib import Path
from typing import Any

import aiohttp

from devicehub.clock import ManualClock
from devicehub.edge.runner import EdgeCore
from support.apps import EventReader
from support.edge import TranslatorClient, api_session, edge_core, local_session
from support.edge import float_objects as objects
from support.node import run, running_node
from support.waiting import eventually


async def status(core: EdgeCore) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{core.http_port}/status") as r:
        assert r.status == 200 and r.content_type == "application/json"
        body: list[dict[str, Any]] = await r.json()
        return body


def test_status_is_connecting_while_the_server_does_not_answer(tmp_path: Path) -> None:
    async def scenario() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # a server that never answers
            silent.bind(("127.0.0.1", 0))
            async with edge_core(tmp_path, silent.getsockname()[1]) as core:
                (record,) = await status(core)
                assert record == {
                    "account-id": "",
                    "edge-version": record["edge-version"],
                    "endpoint-name": "edge-01",
                    "internal-id": "",
                    "lwm2m-server-uri": f"coap://127.0.0.1:{silent.getsockname()[1]}",
                    "status": "connecting",
                }
                assert record["edge-version"]

    run(scenario())


def test_status_is_connected_with_the_device_id_the_service_assigned(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port) as core:
            await eventually(lambda: core.client.status.status == "connected", within=10.0)
            (record,) = await status(core)
            await node.lwm2m.flush()  # answered first, stored with the next batch (issue 16 #1)
            account = await node.store.find_account_by_name("development")
            assert account is not None
            device = await node.store.find_device(account.id, "edge-01")
            assert device is not None
            assert record["internal-id"] == device.id and record["account-id"] == account.id
            assert "error_code" not in record and "error_description" not in record

    run(scenario())


def test_refused_registration_is_an_error_with_its_code(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path / "svc", dev=False) as node, edge_core(tmp_path, node.coap_port) as core:
            await eventually(lambda: core.client.status.status == "error", within=10.0)
            (record,) = await status(core)
            assert record["error_code"] == 403 and "refused" in record["error_description"]
            assert record["internal-id"] == ""

    run(scenario())


def test_a_stopped_service_shows_as_error_within_the_keepalive_bound(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path / "svc") as node:
            core_cm = edge_core(tmp_path, node.coap_port, clock=clock, keepalive_time=10.0, keepalive_interval=1.0)
            core = await core_cm.__aenter__()
            try:
                await eventually(lambda: core.client.status.status == "connected", within=10.0)
                answered_at = clock.now()  # the registration's 2.01 was the last answer
                await node.lwm2m.stop()  # the service stops answering CoAP
                # the keepalive after 10 s idle, then 3 sends over at most 10.5 × 1 s (spec §2.6 lag)
                bound = 10.0 + 10.5 * 1.0
                while True:
                    await clock.wait_for_sleepers(1)  # the idle wait, a retransmission timer or the retry back-off
                    if core.client.status.status == "error":
                        break
                    assert core.client.status.status == "connected"
                    deadline = clock.next_deadline()
                    assert deadline is not None and deadline - answered_at <= bound
                    await clock.advance(deadline - clock.now())  # wake exactly the next timer
                assert 10.0 + 7.0 * 1.0 <= clock.now() - answered_at <= bound  # never before 3 sends went unanswered
                (record,) = await status(core)
                assert record["status"] == "error" and record["error_code"] == 504
            finally:
                await core_cm.__aexit__(None, None, None)

    run(scenario())


def test_status_api_answers_400_404_and_405(tmp_path: Path) -> None:
    async def scenario() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
            silent.bind(("127.0.0.1", 0))
            async with edge_core(tmp_path, silent.getsockname()[1]) as core, aiohttp.ClientSession() as http:
                base = f"http://127.0.0.1:{core.http_port}"
                async with http.get(f"{base}/status?verbose=1") as r:
                    assert r.status == 400 and (await r.json())["code"] == 400
                for path in ("/nothing", "/status/", "/"):
                    async with http.get(f"{base}{path}") as r:
                        assert r.status == 404 and (await r.json())["code"] == 404
                for method in ("POST", "PUT", "DELETE"):
                    async with http.request(method, f"{base}/status") as r:
                        assert r.status == 405 and r.headers["Allow"] == "GET" and (await r.json())["code"] == 405
                # an unparsable request URI, and an empty query (HTTP clients drop a bare `?`): raw requests
                for target in (b"/sta tus", b"/status?"):
                    reader, writer = await asyncio.open_connection("127.0.0.1", core.http_port)
                    writer.write(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    await writer.drain()
                    assert (await reader.readline()).split()[1] == b"400", target
                    writer.close()
                    await writer.wait_closed()

    run(scenario())


def test_child_device_lives_upstream_and_round_trips_values_and_writes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port):
            async with local_session(tmp_path) as local, api_session(node) as http:
                translator = TranslatorClient(await local.ws_connect("http://edge/1/pt"))
                answer = await translator.call("device_register", {"deviceId": "child-1", "objects": objects(20.0)})
                assert answer["error"]["code"] == -30001  # the translator must register itself first
                assert (await translator.call("protocol_translator_register", {"name": "pt-1"}))["result"] == "ok"
                added = await translator.call(
                    "device_register",
                    {"deviceId": "child-1", "lifetime": 300, "queuemode": "-", "objects": objects(20.0)},
                )
                assert added["result"] == "ok"
                again = await translator.call("device_register", {"deviceId": "child-1", "objects": objects(20.0)})
                assert again["error"]["code"] == -30005

                async with http.get("/v3/devices") as r:
                    devices = {d["endpoint_name"]: d for d in (await r.json())["data"]}
                assert devices["child-1"]["state"] == "registered" and "edge-01" in devices
                child_id = devices["child-1"]["id"]

                async with http.put("/v2/notification/websocket") as r:
                    assert r.status == 201
                ws = await http.ws_connect("/v2/notification/websocket-connect")
                events = EventReader(ws)
                async with http.put(f"/v2/subscriptions/{child_id}/3303/0/5700") as r:
                    assert r.status == 202
                await events.wait_for("notifications", lambda e: e["ep"] == child_id)  # the current value
                assert (await translator.call("write", {"deviceId": "child-1", "objects": objects(23.5)}))[
                    "result"
                ] == "ok"
                await events.wait_for("notifications", lambda e: base64.b64decode(e["payload"]) == b"23.5")

                async with http.post(
                    f"/v2/device-requests/{child_id}?async-id=w1",
                    json={"method": "PUT", "uri": "/3303/0/5700", "payload-b64": base64.b64encode(b"18.25").decode()},
                ) as r:
                    assert r.status == 202
                forwarded = await translator.next_request()
                assert forwarded["method"] == "write" and forwarded["params"]["uri"] == {
                    "deviceId": "child-1",
                    "objectId": 3303,
                    "objectInstanceId": 0,
                    "resourceId": 5700,
                }
                assert struct.unpack(">d", base64.b64decode(forwarded["params"]["value"]))[0] == 18.25
                await translator.answer(forwarded)
                response = await events.wait_for("async-responses", lambda e: e["id"] == "w1")
                assert response["status"] == 200

                manager = TranslatorClient(await local.ws_connect("http://edge/1/mgmt"))
                listed = (await manager.call("devices", {}))["result"]["data"]
                assert listed == [
                    {"endpointName": "child-1", "resources": [{"uri": "/3303/0/5700", "type": "float", "operation": 3}]}
                ]
                read = await manager.call("read_resource", {"endpointName": "child-1", "uri": "/3303/0/5700"})
                assert struct.unpack(">d", base64.b64decode(read["result"]["base64Value"]))[0] == 18.25
                await manager.ws.close()

                assert (await translator.call("device_unregister", {"deviceId": "child-1"}))["result"] == "ok"
                await events.wait_for("de-registrations", lambda e: e == child_id)
                await ws.close()
                await translator.ws.close()

    run(scenario())


def test_gateway_object_lists_children_and_a_closed_translator_takes_its_children_away(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port) as core:
            await eventually(lambda: core.client.status.status == "connected", within=10.0)
            async with local_session(tmp_path) as local, api_session(node) as http:
                async with http.put("/v2/notification/websocket") as r:
                    assert r.status == 201
                events = EventReader(await http.ws_connect("/v2/notification/websocket-connect"))
                translator = TranslatorClient(await local.ws_connect("http://edge/1/pt"))
                assert (await translator.call("protocol_translator_register", {"name": "pt-2"}))["result"] == "ok"
                for name in ("child-b", "child-a"):
                    answer = await translator.call("device_register", {"deviceId": name, "objects": objects(1.0)})
                    assert answer["result"] == "ok"
                children = [core.children.get(name) for name in ("child-a", "child-b")]
                ids = [child.device.device_id for child in children if child is not None]
                assert len(ids) == 2

                # the cloud reads the gateway object of Edge Core itself: the children's endpoint names
                edge_id = core.client.status.internal_id
                async with http.post(
                    f"/v2/device-requests/{edge_id}?async-id=gw", json={"method": "GET", "uri": "/33001/0/1"}
                ) as r:
                    assert r.status == 202
                response = await events.wait_for("async-responses", lambda e: e["id"] == "gw")
                assert response["status"] == 200 and base64.b64decode(response["payload"]) == b"child-a,child-b"

                await translator.ws.close()  # the translator goes away: its devices de-register upstream
                for device_id in ids:
                    await events.wait_for("de-registrations", lambda e, d=device_id: e == d)
                assert core.children.names() == []
                count = core.client.model.resource("/33001/0/0")
                assert count is not None and count.value == 0
                await events.ws.close()

    run(scenario())
