"""The translator APIs as mbed-edge's translators and tools call them (issue 11, items 9-13): `/1/pt` responses are
matched and never answered, cloud writes wait for the translator's answer, `/1/mgmt` and `/1/grm` have edge-core's
shapes, unknown methods are -32601, children show their gateway, and Edge Core's own objects behave as a gateway's."""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

import aiohttp

from devicehub._core import lwm2m_cbor_encode
from devicehub.clock import ManualClock
from devicehub.node import Node
from devicehub.sim.device import SimDevice
from support.apps import EventReader
from support.edge import TranslatorClient, api_session, edge_core, float_objects, local_session
from support.node import run, running_node
from support.waiting import eventually


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _double(value: float) -> str:
    return _b64(struct.pack(">d", value))


async def _events(http: aiohttp.ClientSession) -> EventReader:
    async with http.put("/v2/notification/websocket") as r:
        assert r.status == 201
    return EventReader(await http.ws_connect("/v2/notification/websocket-connect"))


async def _request(http: aiohttp.ClientSession, device_id: str, async_id: str, body: dict[str, Any]) -> None:
    async with http.post(f"/v2/device-requests/{device_id}?async-id={async_id}", json=body) as r:
        assert r.status == 202, await r.text()


async def _translator(local: aiohttp.ClientSession, name: str, *devices: str) -> TranslatorClient:
    translator = TranslatorClient(await local.ws_connect("http://edge/1/pt"))
    assert (await translator.call("protocol_translator_register", {"name": name}))["result"] == "ok"
    for device in devices:
        answer = await translator.call("device_register", {"deviceId": device, "objects": float_objects(20.0)})
        assert answer["result"] == "ok", answer
    return translator


async def _device_id(node: Node, endpoint: str) -> str:
    await node.lwm2m.flush()  # registrations are answered first and stored in batches (issue 16 #1)
    account = await node.store.find_account_by_name("development")
    assert account is not None
    device = await node.store.find_device(account.id, endpoint)
    assert device is not None
    return device.id


def test_responses_from_a_translator_are_never_answered(tmp_path: Path) -> None:
    """Item 9: `{"id":"1","result":"ok"}` to Edge Core's `write` used to get a -32600 back, and the two looped."""

    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port):
            async with local_session(tmp_path) as local, api_session(node) as http:
                translator = await _translator(local, "pt-9", "child-9")
                child_id = await _device_id(node, "child-9")
                events = await _events(http)
                put = {"method": "PUT", "uri": "/3303/0/5700", "payload-b64": _b64(b"18.5")}
                await _request(http, child_id, "w9", put)
                write = await translator.next_request()
                frames_before = len(translator.frames)
                await translator.answer(write)  # the exchange of the issue, verbatim in shape
                await translator.send({"jsonrpc": "2.0", "id": "no-such-request", "result": "ok"})
                await translator.send({"jsonrpc": "2.0", "id": "7", "error": {"code": -32600, "message": "x"}})
                await translator.send([{"jsonrpc": "2.0", "id": "8", "result": "ok"}])
                # the very next frame Edge Core sends must be the answer to this call (call() asserts its id)
                update = await translator.call("write", {"deviceId": "child-9", "objects": float_objects(19.0)})
                assert update["result"] == "ok"
                assert len(translator.frames) == frames_before + 1
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "w9"))["status"] == 200
                await events.ws.close()
                await translator.ws.close()

    run(scenario())


def test_cloud_write_answers_with_the_translators_answer(tmp_path: Path) -> None:
    """Item 10: ok → 200 and the value stored; an error answer → failed async-response, value kept, failed echo."""

    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port) as core:
            async with local_session(tmp_path) as local, api_session(node) as http:
                translator = await _translator(local, "pt-10", "child-10")
                child_id = await _device_id(node, "child-10")
                child = core.children.get("child-10")
                assert child is not None
                events = await _events(http)

                await _request(
                    http, child_id, "ok", {"method": "PUT", "uri": "/3303/0/5700", "payload-b64": _b64(b"18.5")}
                )
                write = await translator.next_request()
                assert write["params"]["operation"] == 2
                assert child.device.model.resource("/3303/0/5700").value == 20.0  # type: ignore[union-attr]
                await translator.answer(write)
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "ok"))["status"] == 200
                assert child.device.model.resource("/3303/0/5700").value == 18.5  # type: ignore[union-attr]

                await _request(
                    http, child_id, "no", {"method": "PUT", "uri": "/3303/0/5700", "payload-b64": _b64(b"99")}
                )
                await translator.fail(await translator.next_request())
                failed = await events.wait_for("async-responses", lambda e: e["id"] == "no")
                assert failed["status"] == 500  # mbed-edge map_to_coap_error: 5.00
                assert child.device.model.resource("/3303/0/5700").value == 18.5  # type: ignore[union-attr]
                async with http.get(f"/v3/devices/{child_id}/echo") as r:
                    echo = {res["resource_path"]: res for res in (await r.json())["resources"]}
                assert echo["/3303/0/5700"]["desired"]["status"] == 2
                assert base64.b64decode(echo["/3303/0/5700"]["desired"]["value"]) == b"99"

                # an execute is forwarded with operation 4 and its answer decides too
                await translator.call(
                    "device_register",
                    {
                        "deviceId": "child-x",
                        "objects": [
                            {
                                "objectId": 3311,
                                "objectInstances": [
                                    {"objectInstanceId": 0, "resources": [{"resourceId": 5523, "operations": 4}]}
                                ],
                            }
                        ],
                    },
                )
                execute_id = await _device_id(node, "child-x")
                await _request(http, execute_id, "x", {"method": "POST", "uri": "/3311/0/5523"})
                execute = await translator.next_request()
                assert execute["params"]["operation"] == 4 and execute["params"]["uri"]["resourceId"] == 5523
                await translator.fail(execute)
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "x"))["status"] == 500
                await events.ws.close()
                await translator.ws.close()

    run(scenario())


def test_cloud_writes_in_lwm2m_cbor_to_a_forwarded_resource_or_instance_reach_the_translator(tmp_path: Path) -> None:
    """A CBOR PUT was 4.15 on a forwarded resource, and on an instance it was written locally without asking the
    translator: both are decoded as the simulator decodes them and forwarded, the translator's answer deciding."""

    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port) as core:
            async with local_session(tmp_path) as local, api_session(node) as http:
                translator = await _translator(local, "pt-cbor", "child-cbor")
                child_id = await _device_id(node, "child-cbor")
                child = core.children.get("child-cbor")
                assert child is not None
                events = await _events(http)
                cbor = "application/vnd.oma.lwm2m+cbor"

                single = lwm2m_cbor_encode([((3303, 0, 5700), 18.5)])
                body = {"method": "PUT", "uri": "/3303/0/5700", "content-type": cbor, "payload-b64": _b64(single)}
                await _request(http, child_id, "resource", body)
                write = await translator.next_request()
                assert write["params"]["operation"] == 2 and write["params"]["value"] == _double(18.5)
                assert child.device.model.resource("/3303/0/5700").value == 20.0  # type: ignore[union-attr]
                await translator.answer(write)
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "resource"))["status"] == 200
                assert child.device.model.resource("/3303/0/5700").value == 18.5  # type: ignore[union-attr]

                instance = lwm2m_cbor_encode([((3303, 0, 5700), 17.25)])
                body = {"method": "PUT", "uri": "/3303/0", "content-type": cbor, "payload-b64": _b64(instance)}
                await _request(http, child_id, "instance", body)
                write = await translator.next_request()
                assert write["params"]["operation"] == 2 and write["params"]["value"] == _double(17.25)
                await translator.fail(write)
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "instance"))["status"] == 500
                assert child.device.model.resource("/3303/0/5700").value == 18.5  # type: ignore[union-attr]
                await events.ws.close()
                await translator.ws.close()

    run(scenario())


def test_unanswered_write_times_out_as_gateway_timeout(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with (
            running_node(tmp_path / "svc") as node,
            edge_core(tmp_path, node.coap_port, clock=clock, write_timeout=5),
        ):
            async with local_session(tmp_path) as local, api_session(node) as http:
                translator = await _translator(local, "pt-t", "child-t")
                child_id = await _device_id(node, "child-t")
                events = await _events(http)
                await _request(http, child_id, "t", {"method": "PUT", "uri": "/3303/0/5700", "payload-b64": _b64(b"1")})
                late = await translator.next_request()
                await clock.advance(5)
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "t"))["status"] == 504
                await translator.answer(late)  # too late: dropped, and not answered either
                assert (await translator.call("write", {"deviceId": "child-t", "objects": float_objects(2.0)}))[
                    "result"
                ] == "ok"
                await events.ws.close()
                await translator.ws.close()

    run(scenario())


def test_management_api_has_edge_cores_shapes_and_forwards_writes(tmp_path: Path) -> None:
    """Item 11, as mbed-edge's mgmt_api_internal.c answers `devices`, `read_resource` and `write_resource`."""

    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port):
            async with local_session(tmp_path) as local:
                translator = TranslatorClient(await local.ws_connect("http://edge/1/pt"))
                assert (await translator.call("protocol_translator_register", {"name": "pt-11"}))["result"] == "ok"
                objects = float_objects(21.5)
                objects[0]["objectInstances"][0]["resources"].append(
                    {"resourceId": 5701, "operations": 1, "type": "string", "value": _b64(b"Cel")}
                )
                registered = await translator.call("device_register", {"deviceId": "child-11", "objects": objects})
                assert registered["result"] == "ok"
                mgmt = TranslatorClient(await local.ws_connect("http://edge/1/mgmt"))
                assert (await mgmt.call("devices"))["result"] == {
                    "data": [
                        {
                            "endpointName": "child-11",
                            "resources": [
                                {"uri": "/3303/0/5700", "type": "float", "operation": 3},
                                {"uri": "/3303/0/5701", "type": "string", "operation": 1},
                            ],
                        }
                    ]
                }
                read = await mgmt.call("read_resource", {"endpointName": "child-11", "uri": "/3303/0/5700"})
                assert read["result"] == {"base64Value": _double(21.5), "stringValue": "21.5", "type": "float"}
                read = await mgmt.call("read_resource", {"endpointName": "child-11", "uri": "/3303/0/5701"})
                assert read["result"] == {"base64Value": _b64(b"Cel"), "stringValue": "Cel", "type": "string"}

                where = {"endpointName": "child-11", "uri": "/3303/0/5700"}
                pending = await mgmt_send(mgmt, "write_resource", {**where, "base64Value": _double(17.0)})
                write = await translator.next_request()
                assert write["params"] == {
                    "uri": {"deviceId": "child-11", "objectId": 3303, "objectInstanceId": 0, "resourceId": 5700},
                    "operation": 2,
                    "value": _double(17.0),
                }
                await translator.answer(write)
                assert (await mgmt_answer(mgmt, pending))["result"] == "ok"
                read = await mgmt.call("read_resource", where)
                assert read["result"]["base64Value"] == _double(17.0)

                pending = await mgmt_send(mgmt, "write_resource", {**where, "base64Value": _double(3.0)})
                await translator.fail(await translator.next_request())
                assert (await mgmt_answer(mgmt, pending))["error"]["code"] == -30106
                assert (await mgmt.call("read_resource", where))["result"]["base64Value"] == _double(17.0)

                not_writable = {"endpointName": "child-11", "uri": "/3303/0/5701", "base64Value": _b64(b"F")}
                assert (await mgmt.call("write_resource", not_writable))["error"]["code"] == -30105
                assert (await mgmt.call("write_resource", where))["error"]["code"] == -32602  # no base64Value
                assert (await mgmt.call("write_resource", {**where, "value": _double(1.0)}))["error"]["code"] == -32602
                missing = {"endpointName": "child-11", "uri": "/3303/0/9", "base64Value": _double(1.0)}
                assert (await mgmt.call("write_resource", missing))["error"]["code"] == -30102
                assert (await mgmt.call("read_resource", {"endpointName": "nobody", "uri": "/1/2/3"}))["error"][
                    "code"
                ] == -30102
                bad_uri = {"endpointName": "child-11", "uri": "/3303/0/"}
                assert (await mgmt.call("read_resource", bad_uri))["error"]["code"] == -32602
                assert translator.requests.empty()  # refused writes never reached the translator
                await mgmt.ws.close()
                await translator.ws.close()

    run(scenario())


async def mgmt_send(client: TranslatorClient, method: str, params: dict[str, Any]) -> int:
    client.ids += 1
    await client.send({"jsonrpc": "2.0", "id": client.ids, "method": method, "params": params})
    return client.ids


async def mgmt_answer(client: TranslatorClient, request_id: int) -> dict[str, Any]:
    answer = await client.receive()
    assert answer["id"] == request_id
    return answer


def test_gateway_resource_manager_publishes_resources_of_edge_core_itself(tmp_path: Path) -> None:
    """Item 12, as mbed-edge's grm_api.c: register, add_resource, write_resource_value, and `write` back."""

    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port) as core:
            await eventually(lambda: core.client.status.status == "connected", within=10.0)
            edge_id = core.client.status.internal_id
            async with local_session(tmp_path) as local, api_session(node) as http:
                events = await _events(http)
                grm = TranslatorClient(await local.ws_connect("http://edge/1/grm"))
                resource = {"resourceId": 1, "operations": 3, "type": "string", "value": _b64(b"on")}
                objects = [{"objectId": 33455, "objectInstances": [{"objectInstanceId": 0, "resources": [resource]}]}]
                assert (await grm.call("add_resource", {"objects": objects}))["error"]["code"] == -30200
                assert (await grm.call("gw_resource_manager_register", {"name": "grm-1"}))["result"] == "ok"
                assert (await grm.call("gw_resource_manager_register", {"name": "grm-1"}))["error"]["code"] == -30201
                reserved = [{**objects[0], "objectId": 3}]
                assert (await grm.call("add_resource", {"objects": reserved}))["error"]["code"] == -30250
                assert (await grm.call("add_resource", {"objects": objects}))["result"] == "ok"
                assert (await grm.call("add_resource", {"objects": objects}))["error"]["code"] == -30251

                # Mbed Edge's simple-grm-example adds object 33001, which mbed-edge does not reserve: the gateway's
                # child list gives way and the manager's resource is served in its place
                grm_object = [{**objects[0], "objectId": 33001}]
                answer = await grm.call("add_resource", {"objects": grm_object})
                assert answer.get("result") == "ok", answer
                await _request(http, edge_id, "g1", {"method": "GET", "uri": "/33001/0/1"})
                read = await events.wait_for("async-responses", lambda e: e["id"] == "g1")
                assert read["status"] == 200 and base64.b64decode(read["payload"]) == b"on"

                await _request(http, edge_id, "r1", {"method": "GET", "uri": "/33455/0/1"})
                read = await events.wait_for("async-responses", lambda e: e["id"] == "r1")
                assert read["status"] == 200 and base64.b64decode(read["payload"]) == b"on"

                await _request(http, edge_id, "w1", {"method": "PUT", "uri": "/33455/0/1", "payload-b64": _b64(b"off")})
                write = await grm.next_request()
                assert write["method"] == "write" and write["params"] == {
                    "uri": {"objectId": 33455, "objectInstanceId": 0, "resourceId": 1},
                    "operation": 2,
                    "value": _b64(b"off"),
                }
                await grm.answer(write)
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "w1"))["status"] == 200

                resource["value"] = _b64(b"dim")
                assert (await grm.call("write_resource_value", {"objects": objects}))["result"] == "ok"
                await _request(http, edge_id, "r2", {"method": "GET", "uri": "/33455/0/1"})
                read = await events.wait_for("async-responses", lambda e: e["id"] == "r2")
                assert base64.b64decode(read["payload"]) == b"dim"

                await grm.ws.close()  # the manager goes: its resources go with it
                await eventually(lambda: core.client.model.resource("/33455/0/1") is None, within=10.0)
                await _request(http, edge_id, "r3", {"method": "GET", "uri": "/33455/0/1"})
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "r3"))["status"] == 404
                await events.ws.close()

    run(scenario())


def test_unknown_methods_are_method_not_found_before_any_parameter_check(tmp_path: Path) -> None:
    async def scenario() -> None:
        with_socket = tmp_path / "svc"
        async with running_node(with_socket) as node, edge_core(tmp_path, node.coap_port):
            async with local_session(tmp_path) as local:
                for path in ("pt", "mgmt", "grm"):
                    client = TranslatorClient(await local.ws_connect(f"http://edge/1/{path}"))
                    for params in (None, {}, [1, 2]):
                        answer = await client.call("no_such_method", params)  # type: ignore[arg-type]
                        assert answer["error"]["code"] == -32601, (path, params, answer)
                    # a notification (no id) is not answered: the next frame answers the next request
                    await client.send({"jsonrpc": "2.0", "method": "no_such_method"})
                    assert (await client.call("no_such_method"))["error"]["code"] == -32601
                    assert all(frame.type == aiohttp.WSMsgType.TEXT for frame in client.frames)
                    await client.ws.close()

    run(scenario())


def test_child_devices_name_edge_core_as_their_host_gateway(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port) as core:
            await eventually(lambda: core.client.status.status == "connected", within=10.0)
            async with local_session(tmp_path) as local, api_session(node) as http:
                translator = await _translator(local, "pt-13", "child-13")
                child_id = await _device_id(node, "child-13")
                async with http.get(f"/v3/devices/{child_id}") as r:
                    assert (await r.json())["host_gateway"] == core.client.status.internal_id
                async with http.get(f"/v3/devices/{core.client.status.internal_id}") as r:
                    assert (await r.json())["host_gateway"] == ""
                # a device naming a gateway that is no device of its account gets none
                stray = SimDevice(core.clock, ("127.0.0.1", node.coap_port), "stray-13")
                stray.registration_query = ["gw=nobody"]
                await stray.start()
                try:
                    await eventually(stray.registered.is_set, within=10.0)
                    async with http.get(f"/v3/devices/{stray.device_id}") as r:
                        assert (await r.json())["host_gateway"] == ""
                finally:
                    await stray.stop()
                await translator.ws.close()

    run(scenario())


def test_edge_core_exposes_update_trigger_current_time_and_reboot(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path / "svc") as node, edge_core(tmp_path, node.coap_port, clock=clock) as core:
            await eventually(lambda: core.client.status.status == "connected", within=10.0)
            edge_id = core.client.status.internal_id
            async with api_session(node) as http:
                events = await _events(http)
                await _request(http, edge_id, "t1", {"method": "GET", "uri": "/3/0/13"})
                first = await events.wait_for("async-responses", lambda e: e["id"] == "t1")
                assert int(base64.b64decode(first["payload"])) == int(clock.now())
                await clock.advance(90)
                await _request(http, edge_id, "t2", {"method": "GET", "uri": "/3/0/13"})
                second = await events.wait_for("async-responses", lambda e: e["id"] == "t2")
                assert int(base64.b64decode(second["payload"])) == int(clock.now())
                assert int(base64.b64decode(second["payload"])) - int(base64.b64decode(first["payload"])) == 90

                updates = core.client.counters.updates
                await _request(http, edge_id, "u", {"method": "POST", "uri": "/1/0/8"})
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "u"))["status"] == 200
                await eventually(lambda: core.client.counters.updates == updates + 1, within=10.0)

                registrations = core.client.counters.registrations
                await _request(http, edge_id, "boot", {"method": "POST", "uri": "/3/0/4"})
                assert (await events.wait_for("async-responses", lambda e: e["id"] == "boot"))["status"] == 200
                await events.wait_for("de-registrations", lambda e: e == edge_id)  # a clean end of the link
                await eventually(lambda: core.client.counters.registrations == registrations + 1, within=10.0)
                assert core.client.restarts == 1 and core.client.status.status == "connected"
                await eventually(lambda: node.lwm2m.registration(edge_id) is not None, within=10.0)
                await events.ws.close()

    run(scenario())
