"""Issue 12 §6 and §8 on real UDP and HTTP with the simulator: reads with Accept 11544 / 112, writes and
notifications in CBOR split into the echo, unknown formats refused before anything reaches the device, and
the echo's desired value (content type, desired_at, last success kept across a failed write)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import aiohttp

from devicehub._core import lwm2m_cbor_decode, lwm2m_cbor_encode, senml_cbor_decode, senml_cbor_encode
from support.apps import websocket_app as app
from support.node import device, run, running_node

LWM2M_CBOR = "application/vnd.oma.lwm2m+cbor"
SENML_CBOR = "application/senml+cbor"


async def post(http: aiohttp.ClientSession, device_id: str, async_id: str, body: dict[str, Any]) -> tuple[int, str]:
    async with http.post(f"/v2/device-requests/{device_id}?async-id={async_id}", json=body) as r:
        return r.status, await r.text()


async def echo(http: aiohttp.ClientSession, device_id: str) -> dict[str, dict[str, Any]]:
    async with http.get(f"/v3/devices/{device_id}/echo") as r:
        assert r.status == 200
        return {x["resource_path"]: x for x in (await r.json())["resources"]}


def reported(entry: dict[str, Any]) -> tuple[bytes, str]:
    return base64.b64decode(entry["reported"]["value"]), entry["reported"]["content_type"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_reads_with_accept_lwm2m_cbor_and_senml_cbor_are_split_per_resource_into_the_echo(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "cbor-read") as sim, app(node) as (http, events):
            device_id = sim.device_id or ""
            assert await post(http, device_id, "r1", {"method": "GET", "uri": "/3303/0", "accept": LWM2M_CBOR}) == (
                202,
                "",
            )
            read = await events.wait_for("async-responses", lambda e: e["id"] == "r1")
            assert read["status"] == 200 and read["ct"] == LWM2M_CBOR
            assert ((3303, 0, 5700), 21.5) in lwm2m_cbor_decode(base64.b64decode(read["payload"]))

            assert (await post(http, device_id, "r2", {"method": "GET", "uri": "/3311/0", "accept": SENML_CBOR}))[
                0
            ] == 202
            read = await events.wait_for("async-responses", lambda e: e["id"] == "r2")
            assert read["ct"] == SENML_CBOR
            assert ("/3311/0/5706", "#FFFFFF") in senml_cbor_decode(base64.b64decode(read["payload"]))

            snapshot = await echo(http, device_id)
            assert reported(snapshot["/3303/0/5700"]) == (b"21.5", "text/plain")
            assert reported(snapshot["/3303/0/5701"]) == (b"Cel", "text/plain")
            assert reported(snapshot["/3311/0/5706"]) == (b"#FFFFFF", "text/plain")
            assert reported(snapshot["/3311/0/5850"]) == (b"0", "text/plain")

    run(scenario())


def test_writes_in_cbor_reach_the_device_and_the_echo_keeps_their_content_type(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "cbor-write") as sim, app(node) as (http, events):
            device_id = sim.device_id or ""
            instance = lwm2m_cbor_encode([((3311, 0, 5850), True), ((3311, 0, 5851), 42)])
            body = {"method": "PUT", "uri": "/3311/0", "content-type": LWM2M_CBOR, "payload-b64": b64(instance)}
            assert (await post(http, device_id, "w1", body))[0] == 202
            write = await events.wait_for("async-responses", lambda e: e["id"] == "w1")
            assert write["status"] == 200
            assert sorted(sim.log.writes) == [("/3311/0/5850", True), ("/3311/0/5851", 42)]

            single = senml_cbor_encode([("", 7)], "/3311/0/5851")
            body = {"method": "PUT", "uri": "/3311/0/5851", "content-type": SENML_CBOR, "payload-b64": b64(single)}
            assert (await post(http, device_id, "w2", body))[0] == 202
            assert (await events.wait_for("async-responses", lambda e: e["id"] == "w2"))["status"] == 200
            assert sim.log.writes[-1] == ("/3311/0/5851", 7)

            snapshot = await echo(http, device_id)
            desired = snapshot["/3311/0"]["desired"]
            assert base64.b64decode(desired["value"]) == instance and desired["content_type"] == LWM2M_CBOR
            assert desired["status"] == 1
            assert snapshot["/3311/0/5851"]["desired"]["content_type"] == SENML_CBOR

    run(scenario())


def test_notifications_in_cbor_are_split_into_the_echo(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "cbor-notify") as sim, app(node) as (http, events):
            device_id = sim.device_id or ""
            sim.multi_value_format = 11544  # answers an instance observe in LwM2M CBOR, as Anjay 1.2 may
            async with http.put(f"/v2/subscriptions/{device_id}/3303/0") as r:
                assert r.status in (200, 202)
            sim.set_value("/3303/0/5700", 30.25)
            note = await events.wait_for(
                "notifications",
                lambda n: (
                    n["path"] == "/3303/0"
                    and ((3303, 0, 5700), 30.25) in lwm2m_cbor_decode(base64.b64decode(n["payload"]))
                ),
            )
            assert note["ct"] == LWM2M_CBOR
            snapshot = await echo(http, device_id)
            assert reported(snapshot["/3303/0/5700"]) == (b"30.25", "text/plain")

    run(scenario())


def test_unknown_accept_or_content_type_is_400_and_nothing_reaches_the_device(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "cbor-bad") as sim, app(node) as (http, _events):
            device_id = sim.device_id or ""
            before = sim.counters.requests
            for body in (
                {
                    "method": "PUT",
                    "uri": "/3311/0/5851",
                    "content-type": "application/x-nope",
                    "payload-b64": b64(b"1"),
                },
                {"method": "GET", "uri": "/3303/0", "accept": "application/x-nope"},
                {"method": "GET", "uri": "/3303/0", "accept": "99999"},
            ):
                status, text = await post(http, device_id, "bad", body)
                assert (status, text) == (400, "MALFORMED_JSON_CONTENT")
            assert await post(http, device_id, "num", {"method": "GET", "uri": "/3303/0", "accept": "11544"}) == (
                202,
                "",
            )
            snapshot = await echo(http, device_id)
            assert "desired" not in snapshot.get("/3311/0/5851", {})
            assert sim.counters.requests <= before + 1  # only the accepted numeric-Accept read may have gone out

    run(scenario())


def test_a_failed_write_keeps_the_last_successful_desired_value(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "cbor-fail") as sim, app(node) as (http, events):
            device_id = sim.device_id or ""
            body = {"method": "PUT", "uri": "/3311/0/5851", "payload-b64": b64(b"42")}
            assert (await post(http, device_id, "ok", body))[0] == 202
            await events.wait_for("async-responses", lambda e: e["id"] == "ok")
            first = (await echo(http, device_id))["/3311/0/5851"]["desired"]
            assert first["status"] == 1 and first["content_type"] == "text/plain" and "last_success" not in first

            # a text value of the wrong type is refused by the object model before it is sent (issue 32 #1):
            # malformed TLV is what only the device can refuse
            body = {
                "method": "PUT",
                "uri": "/3311/0/5851",
                "payload-b64": b64(b"\xff"),
                "content-type": "application/vnd.oma.lwm2m+tlv",
            }
            assert (await post(http, device_id, "bad", body))[0] == 202
            failed = await events.wait_for("async-responses", lambda e: e["id"] == "bad")
            assert failed["status"] == 400
            desired = (await echo(http, device_id))["/3311/0/5851"]["desired"]
            assert desired["status"] == 2 and base64.b64decode(desired["value"]) == b"\xff"
            assert desired["last_success"] == {
                "value": b64(b"42"),
                "content_type": "text/plain",
                "desired_at": first["desired_at"],
            }

    run(scenario())
