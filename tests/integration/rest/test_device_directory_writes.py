"""`PUT` and `DELETE /v3/devices/{id}` as Pelion clients send them (issue 11 points 5 and 7), through real HTTP
against a running node with simulated devices on real UDP."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from devicehub.lwm2m import codes
from devicehub.node import Node
from support.apps import EventReader
from support.node import device, run, running_node


@contextlib.asynccontextmanager
async def client(node: Node) -> AsyncIterator[aiohttp.ClientSession]:
    headers = {"Authorization": f"Bearer {node.dev_api_key}"}
    async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
        yield http


async def get_json(http: aiohttp.ClientSession, url: str, status: int = 200) -> Any:
    async with http.get(url) as r:
        assert r.status == status, (url, r.status, await r.text())
        return await r.json()


def test_device_update_round_trip_as_the_sdk_sends_it(tmp_path: Path, store_url: str) -> None:
    """The SDK's foundation `Device.read()` then `.update()`: `PUT /v3/devices/{id}/` with every field it read."""

    async def scenario() -> None:
        async with (
            running_node(tmp_path, redis_url=store_url) as node,
            device(node, "upd-1") as sim,
            client(node) as http,
        ):
            device_id = sim.device_id or ""
            read = await get_json(http, f"/v3/devices/{device_id}/")
            assert read["name"] == "upd-1" and read["custom_attributes"] == {} and read["description"] == ""
            sent = {
                name: read[name]
                for name in ("auto_update", "ca_id", "endpoint_name", "endpoint_type", "host_gateway", "device_key")
            }
            sent |= {"name": "Boiler", "description": "basement", "custom_attributes": {"room": "b1"}}
            async with http.put(f"/v3/devices/{device_id}/", json=sent) as r:
                assert r.status == 200, await r.text()
                answered = await r.json()
            assert answered["name"] == "Boiler" and answered["custom_attributes"] == {"room": "b1"}
            assert answered["endpoint_name"] == "upd-1" and answered["id"] == device_id
            assert await get_json(http, f"/v3/devices/{device_id}") == answered

            # a registration (the device restarts) keeps what the application set
            await sim.stop(deregister=False)
            async with device(node, "upd-1") as again:
                assert again.device_id == device_id
                assert (await get_json(http, f"/v3/devices/{device_id}"))["description"] == "basement"

            async with http.put(f"/v3/devices/{device_id}", json={"description": None}) as r:
                assert r.status == 200 and (await r.json())["description"] == ""

    run(scenario())


def test_device_update_refuses_unknown_and_registration_fields(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "upd-2") as sim, client(node) as http:
            device_id = sim.device_id or ""
            for body, field in (
                ({"name": "x", "colour": "red"}, "colour"),
                ({"endpoint_name": "someone-else"}, "endpoint_name"),
                ({"custom_attributes": {"1st": "x"}}, "custom_attributes"),
                ({"custom_attributes": {f"k{i}": "v" for i in range(6)}}, "custom_attributes"),
                ({"name": "n" * 129}, "name"),
            ):
                async with http.put(f"/v3/devices/{device_id}", json=body) as r:
                    assert r.status == 400, (body, r.status)
                    error = await r.json()
                    assert error["object"] == "error" and error["code"] == 400
                    assert any(field in f["name"] or field in f["message"] for f in error["fields"]), error
            assert (await get_json(http, f"/v3/devices/{device_id}"))["name"] == "upd-2"  # nothing was stored
            async with http.put("/v3/devices/" + "0" * 32, json={"name": "x"}) as r:
                assert r.status == 404

    run(scenario())


def test_delete_device_deregisters_it_and_removes_it_and_its_snapshot(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path, redis_url=store_url) as node,
            device(node, "del-1") as sim,
            client(node) as http,
        ):
            device_id = sim.device_id or ""
            async with http.put("/v2/notification/websocket") as r:
                assert r.status in (200, 201)
            ws = await http.ws_connect("/v2/notification/websocket-connect")
            events = EventReader(ws)
            try:
                assert (await get_json(http, f"/v3/devices/{device_id}/echo"))["resources"]
                async with http.delete(f"/v3/devices/{device_id}") as r:
                    assert r.status == 204
                await events.wait_for("de-registrations", lambda ep: ep == device_id)
                await get_json(http, f"/v3/devices/{device_id}", 404)
                await get_json(http, f"/v3/devices/{device_id}/echo", 404)
                assert await node.store.get_device(device_id) is None
                assert await node.store.get_snapshot(device_id) == []
                assert node.lwm2m.registration(device_id) is None
                # the LwM2M server dropped the registration: the device's next update gets 4.04
                assert await sim.update() == codes.NOT_FOUND
                assert sim.device_id != device_id  # it registered afresh, as a new device
                async with http.delete(f"/v3/devices/{device_id}") as r:
                    assert r.status == 404
            finally:
                await ws.close()

    run(scenario())


def test_deleting_an_offline_device_answers_its_waiting_requests(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, client(node) as http:
            async with device(node, "del-2", flavor="oma") as sim:
                device_id = sim.device_id or ""
            async with http.put("/v2/notification/websocket") as r:
                assert r.status in (200, 201)
            ws = await http.ws_connect("/v2/notification/websocket-connect")
            try:
                async with http.post(
                    f"/v2/device-requests/{device_id}?async-id=waits-1", json={"method": "GET", "uri": "/3/0/0"}
                ) as r:
                    assert r.status == 202
                async with http.delete(f"/v3/devices/{device_id}/") as r:
                    assert r.status == 204
                answer = await EventReader(ws).wait_for("async-responses", lambda e: e["id"] == "waits-1")
                assert answer["status"] == 429 and answer["error"] == "DEVICE_REMOVED_REGISTRATION"
                assert await node.store.pending_requests(device_id) == []
            finally:
                await ws.close()

    run(scenario())
