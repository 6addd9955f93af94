"""Every route answers with and without a trailing slash (issue 11 point 3: the SDK calls `GET /v3/devices/{id}/`,
Pelion's swagger path), checked on a sample of routes of every API area, both spellings, real HTTP."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from support.node import device, run, running_node


def test_a_sample_of_every_area_answers_the_same_with_and_without_a_trailing_slash(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "slash-1") as sim:
            d = sim.device_id or ""
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                sample: list[tuple[str, str, object, int]] = [
                    ("GET", "/v3/devices", None, 200),
                    ("GET", f"/v3/devices/{d}", None, 200),
                    ("PUT", f"/v3/devices/{d}", {"description": "x"}, 200),
                    ("GET", f"/v3/devices/{d}/echo", None, 200),
                    ("GET", f"/v2/endpoints/{d}", None, 200),
                    ("GET", "/v2/subscriptions", None, 200),
                    ("PUT", "/v2/subscriptions", [], 202),
                    ("PUT", f"/v2/subscriptions/{d}/3303/0/5700", None, 202),
                    ("GET", f"/v2/subscriptions/{d}/3303/0/5700", None, 200),
                    ("PUT", "/v2/notification/websocket", None, 200),
                    ("GET", "/v2/notification/websocket", None, 200),
                    ("GET", "/v2/notification/channel", None, 200),
                    ("GET", "/v3/policy-groups", None, 200),
                    ("GET", "/v3/api-keys", None, 200),
                    ("GET", "/openapi.json", None, 200),
                    ("GET", "/health", None, 200),
                ]
                async with http.put("/v2/notification/websocket") as r:  # the channel exists before the sample
                    assert r.status in (200, 201)
                for method, path, body, expected in sample:
                    for spelling in (path, path + "/"):
                        async with http.request(method, spelling, json=body) as r:
                            assert r.status == expected, (method, spelling, r.status, await r.text())
                for spelling in (f"/v2/device-requests/{d}", f"/v2/device-requests/{d}/"):
                    async with http.post(
                        spelling + "?async-id=s" + str(len(spelling)), json={"method": "GET", "uri": "/3/0/0"}
                    ) as r:
                        assert r.status == 202, (spelling, r.status)
                # still 404 / 405 where neither spelling is a route or allows the method
                async with http.get("/v3/nothing-here/") as r:
                    assert r.status == 404
                async with http.post(f"/v3/devices/{d}/") as r:
                    assert r.status == 405 and "GET" in r.headers["Allow"]

                # the omit-defaults trap in the directory: `order` and `obs: false` are always sent
                async with http.get("/v3/devices/") as r:
                    assert (await r.json())["order"] == "ASC"
                async with http.get(f"/v2/endpoints/{d}/") as r:
                    assert all("obs" in resource for resource in await r.json())

    run(scenario())
