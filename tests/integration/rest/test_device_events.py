"""Device lifecycle history (issue 32 #3), on both stores: a real node and simulated devices over CoAP;
`GET /v3/device-events` (and the SDK's `/v3/devicelog`) lists registered, updated (only when the Update changed the
registration), deregistered and expired, filtered with the directory's syntax and paged by time; bad input is 400."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from devicehub.clock import ManualClock
from devicehub.domain.model import ResourceLink
from devicehub.domain.timefmt import rfc3339
from devicehub.lwm2m import codes
from devicehub.node import Node
from support.node import device, run, running_node


def _session(node: Node) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        f"http://127.0.0.1:{node.http_port}", headers={"Authorization": f"Bearer {node.dev_api_key}"}
    )


async def _get(http: aiohttp.ClientSession, path: str, status: int = 200) -> Any:
    async with http.get(path) as r:
        assert r.status == status, await r.text()
        return await r.json()


async def _events(http: aiohttp.ClientSession, query: str = "") -> list[tuple[str, str]]:
    page = await _get(http, f"/v3/device-events?{query}")
    return [(e["device_id"], e["event_type"]) for e in page["data"]]


async def _until_listed(http: aiohttp.ClientSession, wanted: tuple[str, str], within: float = 10.0) -> None:
    """Poll the listing until it holds `wanted` (bounded): the expiry pass runs on the node's own loop."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while wanted not in (found := await _events(http)):
        if loop.time() > end:
            raise AssertionError(f"{wanted} never listed; last listing {found}")
        await asyncio.sleep(0.01)


def test_the_lifecycle_of_devices_is_listed_filtered_and_paged(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        start = clock.now()
        async with running_node(tmp_path, clock=clock, redis_url=store_url) as node, _session(node) as http:
            async with device(node, "life-a", lifetime=60) as a:
                assert await a.update() == codes.CHANGED  # 2.04: the same links, the same address: nothing changed
                await clock.advance(5)
                links = [*a.links(), ResourceLink("/3303/1/5700", obs=True)]
                assert await a.update(links) == codes.CHANGED  # a new resource: an event
                async with device(node, "life-b") as b:
                    pass  # stopping de-registers it
                ida, idb = a.device_id or "", b.device_id or ""
                assert await _events(http) == [
                    (ida, "registered"),
                    (ida, "updated"),
                    (idb, "registered"),
                    (idb, "deregistered"),
                ]
                page = await _get(http, f"/v3/device-events?device_id={ida}")
                first, updated = page["data"]
                assert page["object"] == "list" and page["has_more"] is False and page["order"] == "ASC"
                assert first["object"] == "device-event" and first["date_time"] == rfc3339(start)
                assert first["state_change"] is True and updated["state_change"] is False
                assert updated["changes"] == {"resources": str(len(links))} and updated["date_time"] == rfc3339(
                    start + 5
                )
                assert first["event_type_category"] == "DEVICE_REGISTRATION" and first["description"]

                # the expiry of a silent device (its lifetime and grace run out on the node's clock)
                a.registered.clear()
                await clock.advance(3600)
                await _until_listed(http, (ida, "expired"))

                # filters as the directory takes them: legacy `filter=`, plain parameters, in/nin, dates
                assert await _events(http, f"filter=device_id%3D{idb}") == [(idb, "registered"), (idb, "deregistered")]
                assert await _events(http, "event_type__in=deregistered,expired") == [
                    (idb, "deregistered"),
                    (ida, "expired"),
                ]
                assert await _events(http, f"event_type__neq=registered&device_id__nin={idb}") == [
                    (ida, "updated"),
                    (ida, "expired"),
                ]
                assert await _events(
                    http, f"date_time__gte={rfc3339(start + 1)}&date_time__lte={rfc3339(start + 5)}"
                ) == [
                    (ida, "updated"),
                    (idb, "registered"),
                    (idb, "deregistered"),
                ]
                assert await _events(http, f"date_time__lte={rfc3339(start + 4)}") == [(ida, "registered")]
                assert await _events(http, "state_change__eq=false") == [(ida, "updated")]

                # paged by time both ways, with a total
                one = await _get(http, "/v3/device-events?limit=2&include=total_count")
                assert one["has_more"] is True and one["total_count"] == 5 and len(one["data"]) == 2
                two = await _get(http, f"/v3/device-events?limit=2&after={one['data'][-1]['id']}")
                down = await _get(http, "/v3/device-events?limit=1000&order=DESC")
                ids = [e["id"] for e in one["data"] + two["data"]]
                assert ids == [e["id"] for e in reversed(down["data"])][:4]

                # one event; the SDK's older paths
                event = await _get(http, f"/v3/device-events/{updated['id']}")
                assert event == updated
                assert await _get(http, f"/v3/devicelog/{updated['id']}/") == updated
                assert (await _get(http, "/v3/devicelog/?limit=2"))["data"] == one["data"]
                await _get(http, f"/v3/device-events/{'0' * 48}", 404)
                await _get(http, "/v3/device-events/nonsense", 404)

    run(scenario(), timeout=60)


def test_bad_filters_and_parameters_are_400_naming_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, _session(node) as http:
            for query, field in [
                ("endpoint_name=x", "endpoint_name"),
                ("event_type__gte=x", "event_type__gte"),
                ("date_time__gte=yesterday", "date_time__gte"),
                ("date_time=2026-01-01T00:00:00Z", "date_time"),
                ("state_change=maybe", "state_change"),
                ("filter=nonsense%3D1", "nonsense"),
                ("order=sideways", "order"),
                ("limit=0", "limit"),
                ("include=everything", "include"),
            ]:
                body = await _get(http, f"/v3/device-events?{query}", 400)
                assert body["object"] == "error" and body["code"] == 400, body
                assert field in str(body), (query, body)
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as anonymous:
                async with anonymous.get("/v3/device-events") as r:
                    assert r.status == 401

    run(scenario())
