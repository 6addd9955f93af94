"""`GET /v3/devices` filters through real HTTP, as the official SDK sends them (issue 11 item 4): the legacy
ConnectAPI's URL-encoded `filter=` and the foundation SDK's plain `field__op=` parameters; paging, order,
exact `total_count` under filters; unknown fields and bad values are 400 naming the field. And a
non-numeric LwM2M path in a URL or a request is 400 MALFORMED_PATH (issue 11 item 6)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devicehub.clock import ManualClock
from devicehub.node import Node
from devicehub.sim.device import SimDevice
from support.node import device, run, running_node

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")  # the SDK's own


@contextlib.asynccontextmanager
async def directory(tmp_path: Path) -> AsyncIterator[tuple[Node, aiohttp.ClientSession, dict[str, SimDevice]]]:
    """dir-a (sensor), dir-b (light), dir-c (sensor, then de-registered), created 100 clock seconds apart."""
    clock = ManualClock()
    async with running_node(tmp_path, clock=clock) as node:
        headers = {"Authorization": f"Bearer {node.dev_api_key}"}
        async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
            sims: dict[str, SimDevice] = {}
            async with contextlib.AsyncExitStack() as stack:
                for name, kind in (("dir-a", "sensor"), ("dir-b", "light"), ("dir-c", "sensor")):
                    sims[name] = await stack.enter_async_context(device(node, name, endpoint_type=kind))
                    clock.jump(100)
                await sims["dir-c"].stop()
                yield node, http, sims


async def names(http: aiohttp.ClientSession, query: str) -> tuple[list[str], dict[str, Any]]:
    async with http.get(f"/v3/devices?{query}") as r:
        body = await r.json()
        assert r.status == 200, body
    return [d["name"] for d in body["data"]], body


async def bad(http: aiohttp.ClientSession, query: str) -> str:
    async with http.get(f"/v3/devices?{query}") as r:
        body = await r.json()
        assert r.status == 400 and body["type"] == "validation_error", body
    return str(body["fields"][0]["name"])


def test_filters_on_every_directory_field_both_spellings_with_exact_totals(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with directory(tmp_path) as (_, http, _):
            found, body = await names(http, "filter=endpoint_type%3Dsensor&include=total_count")
            assert sorted(found) == ["dir-a", "dir-c"]
            assert body["total_count"] == 2
            found, body = await names(http, "filter=endpoint_type%3Dsensor%26state%3Dregistered&include=total_count")
            assert found == ["dir-a"] and body["total_count"] == 1
            found, body = await names(http, "endpoint_type__in=light,sensor&state__neq=deregistered&limit=2")
            assert sorted(found) == ["dir-a", "dir-b"] and body["has_more"] is False
            assert (await names(http, "name=dir-b"))[0] == ["dir-b"]
            assert (await names(http, "endpoint_name__nin=dir-a,dir-b"))[0] == ["dir-c"]
            since_b = {d["name"]: d["created_at"] for d in (await names(http, "limit=10"))[1]["data"]}["dir-b"]
            assert sorted((await names(http, f"created_at__gte={since_b}"))[0]) == ["dir-b", "dir-c"]
            legacy_encoded = f"filter=created_at__lte%3D{since_b.replace(':', '%253A')}"  # as urlencode twice
            assert sorted((await names(http, legacy_encoded))[0]) == ["dir-a", "dir-b"]
            short = since_b[:19].replace("-", "").replace(":", "") + "Z"  # Pelion's shortened form, no ms
            assert sorted((await names(http, f"created_at__gte={short}"))[0]) == ["dir-b", "dir-c"]
            assert len((await names(http, "host_gateway__eq=&deployed_state=development"))[0]) == 3
            found, body = await names(http, "mechanism__eq=connector&include=total_count")
            assert found == [] and body["total_count"] == 0
            # pages by device id in both orders, the cursor exclusive, the total independent of the page
            everything = (await names(http, "limit=1000"))[0]
            ids = [d["id"] for d in (await names(http, "limit=1000"))[1]["data"]]
            assert ids == sorted(ids) and len(everything) == 3
            _, body = await names(http, "limit=2&include=total_count&order=DESC")
            assert body["has_more"] is True and body["total_count"] == 3 and body["order"] == "DESC"
            assert [d["id"] for d in body["data"]] == sorted(ids, reverse=True)[:2]
            _, rest = await names(http, f"limit=2&order=DESC&after={body['data'][-1]['id']}")
            assert [d["id"] for d in rest["data"]] == [min(ids)] and rest["has_more"] is False
            # an unknown field, an operator the field lacks, a bad value: 400 naming the parameter
            assert await bad(http, "filter=colour%3Dred") == "colour"
            assert await bad(http, "custom_attributes__room=1") == "custom_attributes__room"
            assert await bad(http, "endpoint_type__gte=a") == "endpoint_type__gte"
            assert await bad(http, "created_at__gte=yesterday") == "created_at__gte"
            assert await bad(http, "state=sleeping") == "state"
            assert await bad(http, "filter=state%3Dsleeping") == "state"
            assert await bad(http, "order=sideways") == "order"
            assert await bad(http, "include=everything") == "include"
            assert await bad(http, "limit=1") == "limit"

    run(scenario())


def test_the_official_sdks_filtered_device_lists(tmp_path: Path) -> None:
    """mbed-cloud-sdk 2.2.0 unchanged: ConnectAPI.list_connected_devices with a filter (sends
    `filter=device_type...`-derived `endpoint_type%3Dsensor%26state%3Dregistered`) and the foundation
    `Device().list(filter=...)` (sends `/v3/devices/?endpoint_type__eq=light`)."""

    async def scenario() -> None:
        async with directory(tmp_path) as (node, _, _):
            host = f"http://127.0.0.1:{node.http_port}"
            key = node.dev_api_key

            def legacy() -> list[str]:
                from mbed_cloud import ConnectAPI

                api = ConnectAPI({"api_key": key, "host": host})
                return [d.name for d in api.list_connected_devices(filters={"device_type": {"$eq": "sensor"}})]

            def foundation() -> list[tuple[str, str]]:
                from mbed_cloud import SDK, ApiFilter

                api_filter = ApiFilter()
                api_filter.add_filter("endpoint_type", "in", ["light", "sensor"])
                api_filter.add_filter("state", "neq", "deregistered")
                sdk = SDK(api_key=key, host=host)
                return sorted((d.name, d.endpoint_type) for d in sdk.foundation.device().list(filter=api_filter))

            assert await asyncio.to_thread(legacy) == ["dir-a"]  # dir-c is a sensor, but not connected
            assert await asyncio.to_thread(foundation) == [("dir-a", "sensor"), ("dir-b", "light")]

    run(scenario())


def test_a_non_numeric_or_twice_encoded_lwm2m_path_is_400_with_a_path_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "path-1") as sim:
            device_id = sim.device_id or ""
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                for method in ("PUT", "GET", "DELETE"):
                    for path in ("abc/0/1", "3303/x", "3303%2Fzero"):
                        async with http.request(method, f"/v2/subscriptions/{device_id}/{path}") as r:
                            assert (r.status, await r.text()) == (400, "MALFORMED_PATH"), (method, path)
                async with http.post(
                    f"/v2/device-requests/{device_id}?async-id=p1", json={"method": "GET", "uri": "/three/0/0"}
                ) as r:
                    assert (r.status, await r.text()) == (400, "MALFORMED_PATH")
                async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700") as r:
                    assert r.status == 202  # a numeric path still subscribes
                async with http.get(f"/v2/subscriptions/{device_id}/3303%2F0%2F5700") as r:
                    assert r.status == 200  # %2F is a slash
                # decoded once: `%252F` is the text `%2F`, not a slash
                async with http.get(f"/v2/subscriptions/{device_id}/3303%252F0%252F5700") as r:
                    assert (r.status, await r.text()) == (400, "MALFORMED_PATH")

    run(scenario())
