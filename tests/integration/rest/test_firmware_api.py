"""Firmware images, manifests and campaigns through real HTTP on both stores (issue 33 #1, #2): uploads streamed and
checked, manifest-tool manifests parsed, bad input answered with a clear error and nothing half-written."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import aiohttp

from devicehub.domain.firmware_model import CampaignDevice
from devicehub.ids import new_device_id
from support.node import run, running_node

FIXTURES = Path(__file__).parents[2] / "support" / "firmware"
IMAGE = (FIXTURES / "image-1.2.3.bin").read_bytes()
MANIFEST = (FIXTURES / "manifest-1.2.3.bin").read_bytes()


def form(datafile: bytes | None, **fields: str) -> aiohttp.FormData:
    data = aiohttp.FormData()
    for name, value in fields.items():
        data.add_field(name, value)
    if datafile is not None:
        data.add_field("datafile", datafile, filename="f.bin", content_type="application/octet-stream")
    return data


async def _json(response: aiohttp.ClientResponse, status: int) -> Any:
    assert response.status == status, await response.text()
    return await response.json()


def test_an_image_is_uploaded_read_back_listed_and_deleted(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=store_url) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.post("/v3/firmware-images", data=form(IMAGE, name="fw", description="d")) as r:
                    image = await _json(r, 201)
                assert image["object"] == "firmware-image" and image["name"] == "fw" and image["description"] == "d"
                assert image["datafile_checksum"] == hashlib.sha256(IMAGE).hexdigest()
                assert image["datafile_size"] == len(IMAGE)
                async with http.get(image["datafile"]) as r:
                    assert r.status == 200 and await r.read() == IMAGE
                async with http.get(f"/v3/firmware-images/{image['id']}") as r:
                    assert (await _json(r, 200)) == image
                async with http.get("/v3/firmware-images") as r:
                    assert [i["id"] for i in (await _json(r, 200))["data"]] == [image["id"]]
                async with http.delete(f"/v3/firmware-images/{image['id']}") as r:
                    assert r.status == 204
                for method in ("GET", "DELETE"):
                    async with http.request(method, f"/v3/firmware-images/{image['id']}") as r:
                        assert (await _json(r, 404))["type"] == "not_found"

    run(scenario())


def test_an_image_over_the_cap_is_413_and_leaves_nothing(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=store_url, firmware_max_bytes=100_000) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.post("/v3/firmware-images", data=form(b"x" * 200_000, name="big")) as r:
                    error = await _json(r, 413)
                assert error["type"] == "payload_too_large" and "--firmware-max-bytes" in error["message"]
                async with http.post("/v3/firmware-images", data=form(None, name="no file")) as r:
                    assert "datafile" in (await _json(r, 400))["message"]
                async with http.post("/v3/firmware-images", json={"name": "not multipart"}) as r:
                    assert (await _json(r, 400))["type"] == "bad_request"
                late = aiohttp.FormData()  # a bad field after the file: the whole upload fails, the file too
                late.add_field("datafile", IMAGE, filename="f.bin")
                late.add_field("description", "x" * 5000)
                async with http.post("/v3/firmware-images", data=late) as r:
                    assert (await _json(r, 400))["fields"][0]["name"] == "description"
                async with http.get("/v3/firmware-images") as r:
                    assert (await _json(r, 200))["data"] == []
            if not store_url:
                assert not any((tmp_path / "firmware").rglob("*")) or all(
                    p.is_dir() for p in (tmp_path / "firmware").rglob("*")
                )  # the bytes written before the cap were removed

    run(scenario())


def test_a_manifest_tool_manifest_is_parsed_and_a_malformed_one_is_400(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=store_url) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.post("/v3/firmware-manifests", data=form(MANIFEST, name="m")) as r:
                    manifest = await _json(r, 201)
                assert manifest["object"] == "firmware-manifest" and manifest["name"] == "m"
                assert manifest["delivered_payload_digest"] == hashlib.sha256(IMAGE).hexdigest()
                assert manifest["delivered_payload_size"] == len(IMAGE)
                assert manifest["delivered_payload_url"] == "coap://devicehub.example/fw/image-1.2.3.bin"
                assert manifest["parsed_raw_manifest"]["payload_version"] == "1.2.3"
                assert manifest["datafile_size"] == len(MANIFEST)
                assert len(manifest["device_class"]) == 36 and len(manifest["device_vendor"]) == 36  # UUIDs
                async with http.get(manifest["datafile"]) as r:
                    assert await r.read() == MANIFEST
                for bad in (b"not a manifest", MANIFEST[:-5], b"\x30\x03\x0a\x01\x01"):
                    async with http.post("/v3/firmware-manifests", data=form(bad)) as r:
                        error = await _json(r, 400)
                    assert error["fields"][0]["name"] == "datafile", error
                async with http.get("/v3/firmware-manifests") as r:
                    assert [m["id"] for m in (await _json(r, 200))["data"]] == [manifest["id"]]
                async with http.delete(f"/v3/firmware-manifests/{manifest['id']}") as r:
                    assert r.status == 204

    run(scenario())


def test_campaign_bad_input_is_a_clear_error_and_writes_nothing(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=store_url) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                bad_bodies = (
                    ({"device_filter": ""}, "device_filter"),
                    ({"device_filter": "colour=red"}, "colour"),
                    ({"device_filter": "endpoint_type=x", "root_manifest_id": "0" * 32}, "root_manifest_id"),
                    ({"device_filter": "endpoint_type=x", "halt_failure_percent": 150}, "halt_failure_percent"),
                )
                for body, field in bad_bodies:
                    async with http.post("/v3/update-campaigns", json=body) as r:
                        error = await _json(r, 400)
                    assert error["fields"][0]["name"] == field, error
                async with http.get("/v3/update-campaigns") as r:
                    assert (await _json(r, 200))["data"] == []
                async with http.post("/v3/firmware-manifests", data=form(MANIFEST)) as r:
                    manifest = await _json(r, 201)
                body = {"device_filter": "endpoint_type=nothing-here", "root_manifest_id": manifest["id"], "name": "c"}
                async with http.post("/v3/update-campaigns", json={**body, "state": "scheduled"}) as r:
                    assert "upload it first" in (await _json(r, 409))["message"]  # created to start: it cannot
                async with http.get("/v3/update-campaigns") as r:
                    assert (await _json(r, 200))["data"] == []  # … so nothing was created
                async with http.post("/v3/update-campaigns", json=body) as r:
                    campaign = await _json(r, 201)
                assert campaign["phase"] == "draft" and campaign["state"] == "draft"
                path = f"/v3/update-campaigns/{campaign['id']}"
                async with http.post(f"{path}/start") as r:  # the manifest's image was never uploaded
                    assert "upload it first" in (await _json(r, 409))["message"]
                async with http.get(path) as r:
                    assert (await _json(r, 200))["phase"] == "draft"  # nothing moved
                async with http.post(f"{path}/stop") as r:
                    assert "phase draft" in (await _json(r, 409))["message"]
                async with http.post("/v3/firmware-images", data=form(IMAGE)) as r:
                    await _json(r, 201)
                async with http.post(f"{path}/start") as r:
                    assert (await _json(r, 202))["phase"] == "starting"
                async with http.post(f"{path}/start") as r:  # start twice
                    assert (await _json(r, 409))["type"] == "conflict"
                async with http.put(path, json={"state": "scheduled"}) as r:  # the SDK's start, twice too
                    assert r.status == 409
                async with http.delete(path) as r:
                    assert r.status in (204, 409)  # 409 while running; the engine may have stopped it already

    run(scenario())


def test_campaign_device_metadata_pages_continue_after_the_last_item_s_id(tmp_path: Path, store_url: str) -> None:
    """Pelion's list `after` is "the ID of the item after which to retrieve the next page"; an item's id was
    `campaign[:16] + device[16:]` and the store's cursor the device id, so the next page began again from the
    start. Walked with limit=2 and the last item's id, five devices are listed once each, in device-id order."""

    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=store_url) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.post("/v3/firmware-manifests", data=form(MANIFEST)) as r:
                    manifest = await _json(r, 201)
                body = {"device_filter": "endpoint_type=x", "root_manifest_id": manifest["id"], "name": "c"}
                async with http.post("/v3/update-campaigns", json=body) as r:
                    campaign = await _json(r, 201)
                account_id = (await node.accounts.authenticate(node.dev_api_key)).account_id
                device_ids = sorted(new_device_id() for _ in range(5))
                for n, device_id in enumerate(device_ids):  # the devices a start would have chosen
                    await node.store.put_campaign_device(
                        account_id,
                        CampaignDevice(
                            campaign_id=campaign["id"],
                            device_id=device_id,
                            endpoint_name=f"ep-{n}",
                            created_at=1.0,
                            updated_at=1.0,
                        ),
                    )
                listed: list[dict[str, Any]] = []
                query = "limit=2"
                for _ in range(len(device_ids)):  # a page at least each: a loop that never ends fails here
                    async with http.get(f"/v3/update-campaigns/{campaign['id']}/campaign-device-metadata?{query}") as r:
                        page = await _json(r, 200)
                    listed += page["data"]
                    if not page["has_more"]:
                        break
                    query = f"limit=2&after={page['data'][-1]['id']}"
        assert [item["device_id"] for item in listed] == device_ids
        assert len({item["id"] for item in listed}) == len(device_ids)

    run(scenario())
