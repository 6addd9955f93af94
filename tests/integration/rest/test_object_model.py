"""The LwM2M object model through the API (issue 32 #1): the registry's and an account's own definitions at
`/v3/lwm2m-objects`, and device requests the model says a resource cannot take refused before they are sent."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devicehub.cli import main
from support.apps import websocket_app as app
from support.ddf import ddf
from support.node import device, run, running_node

XML = {"Content-Type": "application/xml"}
PUMP = ddf(33000, "Pump", (1, "Speed", "RW", "Integer", "rpm"), (2, "Prime", "E", "", ""))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def post_request(http: aiohttp.ClientSession, device_id: str, async_id: str, body: dict[str, Any]) -> int:
    async with http.post(f"/v2/device-requests/{device_id}?async-id={async_id}", json=body) as r:
        return r.status


def test_the_registry_and_an_accounts_own_definitions_are_listed_added_replaced_and_deleted(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, app(node) as (http, _):
            async with http.get("/v3/lwm2m-objects/3303") as r:
                temperature = await r.json()
            assert r.status == 200 and temperature["name"] == "Temperature" and temperature["source"] == "registry"
            sensor = next(x for x in temperature["resources"] if x["id"] == 5700)
            assert (sensor["name"], sensor["operations"], sensor["type"]) == ("Sensor Value", "R", "float")

            async with http.post("/v3/lwm2m-objects", data=PUMP, headers=XML) as r:
                assert r.status == 201, await r.text()
                assert [o["id"] for o in (await r.json())["data"]] == [33000]
            async with http.post("/v3/lwm2m-objects", data=PUMP, headers=XML) as r:
                assert r.status == 409 and "replace=true" in (await r.json())["message"]
            renamed = PUMP.replace(b"<Name>Pump</Name>", b"<Name>Big pump</Name>")
            async with http.post("/v3/lwm2m-objects?replace=true", data=renamed, headers=XML) as r:
                assert r.status == 201
            async with http.get("/v3/lwm2m-objects") as r:
                listed = {o["id"]: o for o in (await r.json())["data"]}
            assert listed[33000]["name"] == "Big pump" and listed[33000]["source"] == "account"
            assert listed[33000]["resources"][0]["units"] == "rpm" and 3 in listed

            for bad, reason in ((b"<LWM2M><Object>", "not well-formed"), (b"<!DOCTYPE x []><LWM2M/>", "DTD")):
                async with http.post("/v3/lwm2m-objects", data=bad, headers=XML) as r:
                    assert r.status == 400 and reason in (await r.json())["message"]

            async with http.delete("/v3/lwm2m-objects/33000") as r:
                assert r.status == 204
            async with http.get("/v3/lwm2m-objects/33000") as r:
                assert r.status == 404
            async with http.delete("/v3/lwm2m-objects/3") as r:
                assert r.status == 404  # the registry's definitions are not the account's to delete

    run(scenario())


def test_a_write_or_execute_the_model_forbids_is_405_a_wrong_type_400_and_nothing_reaches_the_device(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path) as node,
            device(node, "model-1", flavor="oma") as sim,
            app(node) as (
                http,
                events,
            ),
        ):
            device_id = sim.device_id or ""
            # /3/0/0 Manufacturer is R, /3303/0/5700 Sensor Value is R (not E), /3/0/4 Reboot is E (not W)
            for uri, method in (("/3/0/0", "PUT"), ("/3303/0/5700", "POST"), ("/3/0/4", "PUT")):
                body = {"method": method, "uri": uri, "payload-b64": b64("1")}
                assert await post_request(http, device_id, f"no-{uri.replace('/', '-')}", body) == 405
            # /3311/0/5851 Dimmer is an Integer
            assert (
                await post_request(
                    http, device_id, "typed", {"method": "PUT", "uri": "/3311/0/5851", "payload-b64": b64("bright")}
                )
                == 400
            )
            async with http.get(f"/v3/devices/{device_id}/echo") as r:
                echoed = {x["resource_path"]: x for x in (await r.json())["resources"]}
            assert all("desired" not in echoed.get(p, {}) for p in ("/3/0/0", "/3311/0/5851"))

            # what the model allows still goes: a typed write, an execute, write-attributes on a read-only resource
            for async_id, body in (
                ("dim", {"method": "PUT", "uri": "/3311/0/5851", "payload-b64": b64("42")}),
                ("boot", {"method": "POST", "uri": "/3/0/4"}),
                ("attrs", {"method": "PUT", "uri": "/3303/0/5700?pmin=5"}),
            ):
                assert await post_request(http, device_id, async_id, body) == 202
                answer = await events.wait_for("async-responses", lambda e, a=async_id: e["id"] == a)
                assert answer["status"] == 200
            assert sim.log.writes == [("/3311/0/5851", 42)] and [p for p, _ in sim.log.executes] == ["/3/0/4"]

            # a resource the model does not know is left to the device, as before
            assert await post_request(http, device_id, "unknown", {"method": "POST", "uri": "/33999/0/1"}) == 202
            answer = await events.wait_for("async-responses", lambda e: e["id"] == "unknown")
            assert answer["status"] == 404

    run(scenario())


def test_cli_adds_lists_and_deletes_an_accounts_definitions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def cli(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--data-dir", str(tmp_path)])
        out, err = capsys.readouterr()
        return code, out, err

    assert cli("accounts", "create", "acme")[0] == 0
    (tmp_path / "pump.xml").write_bytes(PUMP)
    assert cli("objects", "add", str(tmp_path / "pump.xml"), "--account", "acme") == (
        0,
        "33000\tPump\t2 resources\n",
        "",
    )
    code, _, err = cli("objects", "add", str(tmp_path / "pump.xml"), "--account", "acme")
    assert code == 2 and "replace" in err
    (tmp_path / "bad.xml").write_bytes(b"<LWM2M><Object>")
    code, _, err = cli("objects", "add", str(tmp_path / "bad.xml"), "--account", "acme")
    assert code == 2 and "not well-formed XML" in err and len(err.splitlines()) == 1
    assert cli("objects", "list", "--account", "acme")[1] == "33000\tPump\taccount\n"
    assert "3303\tTemperature\tregistry" in cli("objects", "list", "--all", "--account", "acme")[1]
    assert cli("objects", "delete", "33000", "--account", "acme")[0] == 0
    assert cli("objects", "list", "--account", "acme")[1] == ""


def test_tlv_values_are_typed_by_the_model_in_the_snapshot_and_unknown_ones_stay_tlv(tmp_path: Path) -> None:
    """TLV carries no types: 1, 2, 4 or 8 value bytes are an Integer or a Float (or a Time, a String…) only by the
    resource's definition. Known resources reach the echo as text/plain; a resource the model does not know is kept
    as a one-resource TLV, as before."""

    async def scenario() -> None:
        async with (
            running_node(tmp_path) as node,
            device(node, "tlv-1", flavor="oma") as sim,
            app(node) as (
                http,
                events,
            ),
        ):
            device_id = sim.device_id or ""

            async def read_echo(async_id: str, uri: str) -> dict[str, Any]:
                body = {"method": "GET", "uri": uri, "accept": "application/vnd.oma.lwm2m+tlv"}
                assert await post_request(http, device_id, async_id, body) == 202
                answer = await events.wait_for("async-responses", lambda e: e["id"] == async_id)
                assert answer["status"] == 200 and answer["ct"] == "application/vnd.oma.lwm2m+tlv"  # the wire: raw
                async with http.get(f"/v3/devices/{device_id}/echo") as r:
                    return {x["resource_path"]: x["reported"] for x in (await r.json())["resources"] if "reported" in x}

            echoed = await read_echo("tlv-3", "/3/0")
            for path, text in (("/3/0/9", b"100"), ("/3/0/0", b"devicehub")):
                assert echoed[path]["content_type"] == "text/plain", path
                assert base64.b64decode(echoed[path]["value"]) == text
            assert int(base64.b64decode(echoed["/3/0/13"]["value"])) > 1_700_000_000  # Current Time, a Time
            temperature = await read_echo("tlv-3303", "/3303/0")
            assert base64.b64decode(temperature["/3303/0/5700"]["value"]) == b"21.5"  # a Float, not an Integer

            # the account's own definition of object 3 knows resource 0 only: resource 9 stays TLV
            only_name = ddf(3, "Device", (0, "Manufacturer", "R", "String", ""))
            async with http.post("/v3/lwm2m-objects", data=only_name, headers=XML) as r:
                assert r.status == 201
            echoed = await read_echo("tlv-3-again", "/3/0")
            assert echoed["/3/0/0"]["content_type"] == "text/plain"
            assert echoed["/3/0/9"]["content_type"] == "application/vnd.oma.lwm2m+tlv"

    run(scenario())
