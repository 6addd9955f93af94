"""A campaign updates child devices of Edge Core (issue 33 #4: "Devices on Edge Core go through the protocol
translator's `write`"). The child's object 5 belongs to its protocol translator: the service's Write of the Package
URI /5/0/1 and Execute of Update /5/0/2 reach the translator as Edge Core's `write` JSON-RPC request (operation 2
and 4, mbed-edge `edge-core/protocol_api.c` `write_to_pt`, called from `edge-client/edge_client.cpp`
`edgeclient_endpoint_value_set_handler` / the execute handler), and what the translator reports with its own
`write` (State /5/0/3, Update Result /5/0/5) is what moves the campaign device. The translator here speaks raw
JSON-RPC 2.0 over Edge Core's Unix socket and downloads the package with libcoap's client, as a translator would
before handing it to its device."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from support.edge import TranslatorClient, api_session, edge_core, local_session
from support.firmware_api import IMAGE, MANIFEST
from support.node import run, running_node
from support.third_party import coap_client_binary
from support.waiting import eventually

READ, WRITE, EXECUTE = 1, 2, 4


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def integer(value: int) -> str:
    return b64(struct.pack(">q", value))  # Mbed Edge: integers big-endian


def object5(state: int = 0, result: int = 0) -> list[dict[str, Any]]:
    """Object 5 as a translator declares it for its device (5.xml resources 1, 2, 3, 5) and the Device object's
    Firmware Version."""
    resources = [
        {"resourceId": 0, "operations": WRITE, "type": "opaque", "value": ""},
        {"resourceId": 1, "operations": READ | WRITE, "type": "string", "value": ""},
        {"resourceId": 2, "operations": EXECUTE, "type": "opaque", "value": ""},
        {"resourceId": 3, "operations": READ, "type": "int", "value": integer(state)},
        {"resourceId": 5, "operations": READ, "type": "int", "value": integer(result)},
    ]
    version = [{"resourceId": 3, "operations": READ, "type": "string", "value": b64(b"1.0.0")}]
    return [
        {"objectId": 5, "objectInstances": [{"objectInstanceId": 0, "resources": resources}]},
        {"objectId": 3, "objectInstances": [{"objectInstanceId": 0, "resources": version}]},
    ]


def form(datafile: bytes) -> aiohttp.FormData:
    data = aiohttp.FormData()
    data.add_field("datafile", datafile, filename="f.bin")
    return data


def values(*pairs: tuple[int, int, str, str]) -> list[dict[str, Any]]:
    """A `write` of values: (object, resource, type, base64 value) for instance 0."""
    objects: dict[int, list[dict[str, Any]]] = {}
    for oid, rid, kind, value in pairs:
        objects.setdefault(oid, []).append({"resourceId": rid, "operations": READ, "type": kind, "value": value})
    return [
        {"objectId": oid, "objectInstances": [{"objectInstanceId": 0, "resources": res}]}
        for oid, res in objects.items()
    ]


async def download(uri: str, into: Path) -> bytes:
    """The package at `uri`, fetched with libcoap's client (Block2, RFC 7959)."""
    process = await asyncio.create_subprocess_exec(
        coap_client_binary(), "-m", "get", "-B", "20", "-o", str(into), uri, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr
    return await asyncio.to_thread(into.read_bytes)


async def translate(translator: TranslatorClient, tmp_path: Path, outcome: dict[str, int]) -> list[tuple[str, int]]:
    """The translator's side of an update for each of its devices: the Package URI written → download, report
    Downloading then Downloaded; Update executed → report Updating, then the device's result (`outcome`: 1 comes back
    Idle with the new version). Returns each (device, operation on a resource) it was asked, in order."""
    asked: list[tuple[str, int]] = []
    finished: set[str] = set()
    while finished != set(outcome):
        request = await translator.next_request()
        assert request["method"] == "write", request
        uri, operation = request["params"]["uri"], request["params"]["operation"]
        device, path = uri["deviceId"], (uri["objectId"], uri["objectInstanceId"], uri["resourceId"])
        asked.append((f"{device}/{path[0]}/{path[1]}/{path[2]}", operation))
        await translator.answer(request)
        if path in ((5, 0, 0), (5, 0, 1)) and operation == WRITE:
            value = base64.b64decode(request["params"]["value"])
            await translator.call("write", {"deviceId": device, "objects": values((5, 3, "int", integer(1)))})
            package = value if path == (5, 0, 0) else await download(value.decode(), tmp_path / f"{device}.bin")
            assert package == IMAGE.read_bytes()
            await translator.call("write", {"deviceId": device, "objects": values((5, 3, "int", integer(2)))})
        elif path == (5, 0, 2) and operation == EXECUTE:
            await translator.call("write", {"deviceId": device, "objects": values((5, 3, "int", integer(3)))})
            result = outcome[device]
            report = values((5, 3, "int", integer(0 if result == 1 else 2)), (5, 5, "int", integer(result)))
            if result == 1:
                report += values((3, 3, "string", b64(b"1.2.3")))
            await translator.call("write", {"deviceId": device, "objects": report})
            finished.add(device)
    return asked


@contextlib.asynccontextmanager
async def edge_children(
    tmp_path: Path, *children: str
) -> AsyncIterator[tuple[TranslatorClient, aiohttp.ClientSession]]:
    """A node with Edge Core, a translator registered on it and `children` registered through it with object 5 (at
    Idle); the translator's client and an API session on the node."""
    async with (
        running_node(tmp_path / "svc", firmware_check_interval=0.05) as node,
        edge_core(tmp_path, node.coap_port),
        local_session(tmp_path) as local,
        api_session(node) as http,
    ):
        translator = TranslatorClient(await local.ws_connect("http://edge/1/pt"))
        assert (await translator.call("protocol_translator_register", {"name": "pt-fw"}))["result"] == "ok"
        for child in children:
            params = {"deviceId": child, "lifetime": 300, "queuemode": "-", "objects": object5()}
            assert (await translator.call("device_register", params))["result"] == "ok"
        await node.lwm2m.flush()
        yield translator, http


async def start_campaign(http: aiohttp.ClientSession, **fields: str) -> str:
    """The image and its manifest uploaded, a campaign over the Edge children (`fields` added) created and started:
    its path."""
    async with http.post("/v3/firmware-images", data=form(IMAGE.read_bytes())) as r:
        assert r.status == 201
    async with http.post("/v3/firmware-manifests", data=form(MANIFEST.read_bytes())) as r:
        manifest = await r.json()
    body = {"device_filter": "endpoint_type=MBED_DEVICE", "root_manifest_id": manifest["id"], **fields}
    async with http.post("/v3/update-campaigns", json=body) as r:
        assert r.status == 201, await r.text()
        path = f"/v3/update-campaigns/{(await r.json())['id']}"
    async with http.post(f"{path}/start") as r:
        assert r.status == 202
    return path


async def campaign_of(http: aiohttp.ClientSession, path: str) -> dict[str, Any]:
    async with http.get(path) as r:
        found: dict[str, Any] = await r.json()
        return found


@pytest.mark.parametrize("delivery", ["pull", "push"])
def test_a_campaign_updates_edge_children_through_their_translator(tmp_path: Path, delivery: str) -> None:

    async def scenario() -> None:
        async with edge_children(tmp_path, "child-ok", "child-bad") as (translator, http):
            path = await start_campaign(http, delivery=delivery)

            asked = await asyncio.wait_for(translate(translator, tmp_path, {"child-ok": 1, "child-bad": 8}), 60)

            await eventually(
                lambda: campaign_of(http, path), accept=lambda c: c["phase"] == "stopped", within=20.0, what="stopped"
            )
            async with http.get(f"{path}/campaign-device-metadata") as r:
                states = {d["name"]: d for d in (await r.json())["data"]}
            await translator.ws.close()

        for child in ("child-ok", "child-bad"):  # the Package URI written, then Update executed, through `write`
            mine = [a for a in asked if a[0].startswith(child + "/")]
            target = "5/0/1" if delivery == "pull" else "5/0/0"
            assert mine == [(f"{child}/{target}", WRITE), (f"{child}/5/0/2", EXECUTE)]
        assert states["child-ok"]["deployment_state"] == "deployed"
        assert states["child-ok"]["update_result"] == 1 and states["child-ok"]["firmware_version"] == "1.2.3"
        assert states["child-bad"]["deployment_state"] == "failed_connector_channel_update"
        assert "Update Result 8: firmware update failed" in states["child-bad"]["description"]

    run(scenario())


def test_a_stopped_campaign_cancels_a_childs_download_with_an_empty_package_uri(tmp_path: Path) -> None:
    """5.xml Package URI: writing an empty string resets the state machine (cancels the download). mbed-edge's own
    `write_to_pt` drops a zero-length write ("value length is 0. Abort value write."); devicehub's Edge Core forwards
    it, since a translator has no other way to hear that the update it is downloading was called off."""

    async def scenario() -> None:
        async with edge_children(tmp_path, "child-1") as (translator, http):
            path = await start_campaign(http)

            written = await translator.next_request()  # the Package URI: the child starts downloading (and stays)
            assert written["params"]["uri"]["resourceId"] == 1 and written["params"]["value"]
            await translator.answer(written)
            await translator.call("write", {"deviceId": "child-1", "objects": values((5, 3, "int", integer(1)))})
            async with http.post(f"{path}/stop") as r:
                assert r.status == 202
            cancel = await translator.next_request()
            assert cancel["method"] == "write" and cancel["params"]["operation"] == WRITE
            assert cancel["params"]["uri"] == {
                "deviceId": "child-1",
                "objectId": 5,
                "objectInstanceId": 0,
                "resourceId": 1,
            }
            assert cancel["params"]["value"] == ""  # the empty Package URI
            await translator.answer(cancel)

            await eventually(
                lambda: campaign_of(http, path), accept=lambda c: c["phase"] == "stopped", within=20.0, what="stopped"
            )
            async with http.get(f"{path}/campaign-device-metadata") as r:
                (device,) = (await r.json())["data"]
            await translator.ws.close()
        assert "the campaign stopped" in device["description"]

    run(scenario())
