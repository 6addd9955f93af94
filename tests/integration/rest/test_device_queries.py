"""Saved device directory filters (issue 32 #3): `/v3/device-queries` create, read, list, rename, delete on a real
node; a query the directory refuses is 400 with a JSON error naming the field, a name taken in the account 409."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from devicehub.domain.saved_queries import MAX_PER_ACCOUNT
from devicehub.node import Node
from support.node import run, running_node


def _session(node: Node, key: str | None = None) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        f"http://127.0.0.1:{node.http_port}", headers={"Authorization": f"Bearer {key or node.dev_api_key}"}
    )


async def _call(http: aiohttp.ClientSession, method: str, path: str, status: int, body: Any = None) -> Any:
    async with http.request(method, path, json=body) as r:
        assert r.status == status, (method, path, r.status, await r.text())
        return await r.json() if r.status != 204 else None


def test_device_queries_are_saved_listed_renamed_and_deleted(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=store_url) as node, _session(node) as http:
            made = await _call(http, "POST", "/v3/device-queries", 201, {"name": "sensors", "query": "endpoint_type=s"})
            assert made["object"] == "device-query" and made["query"] == "endpoint_type=s"
            assert made["created_at"] == made["updated_at"] == made["etag"]
            other = await _call(
                http, "POST", "/v3/device-queries/", 201, {"name": "live", "query": "state__eq=registered"}
            )
            assert await _call(http, "GET", f"/v3/device-queries/{made['id']}", 200) == made

            page = await _call(http, "GET", "/v3/device-queries?limit=2&include=total_count", 200)
            assert [q["name"] for q in page["data"]] == ["sensors", "live"] and page["total_count"] == 2
            assert page["object"] == "list" and page["has_more"] is False
            assert [q["name"] for q in (await _call(http, "GET", "/v3/device-queries?order=DESC", 200))["data"]] == [
                "live",
                "sensors",
            ]
            after = await _call(http, "GET", f"/v3/device-queries?after={made['id']}", 200)
            assert [q["id"] for q in after["data"]] == [other["id"]]
            named = await _call(http, "GET", "/v3/device-queries?name__eq=live", 200)
            assert [q["id"] for q in named["data"]] == [other["id"]]

            # a taken name is 409; a rename frees the old one
            await _call(http, "POST", "/v3/device-queries", 409, {"name": "live", "query": "state=registered"})
            await _call(http, "PUT", f"/v3/device-queries/{made['id']}", 409, {"name": "live"})
            renamed = await _call(http, "PUT", f"/v3/device-queries/{made['id']}", 200, {"name": "boilers"})
            assert renamed["query"] == "endpoint_type=s" and renamed["created_at"] == made["created_at"]
            await _call(http, "POST", "/v3/device-queries", 201, {"name": "sensors", "query": "id__in=a,b"})

            # bad input: a query the directory refuses, missing or oversized fields, unknown ids, list filters
            for body, field in [
                ({"name": "x", "query": "colour=red"}, "colour"),
                ({"name": "x", "query": "created_at__gte=yesterday"}, "created_at__gte"),
                ({"name": "x", "query": "state=asleep"}, "state"),
                ({"name": "x"}, "query"),
                ({"query": "state=registered"}, "name"),
                ({"name": "", "query": "state=registered"}, "name"),
                ({"name": "x" * 201, "query": "state=registered"}, "name"),
                ({"name": "x", "query": "state=registered" + "&id=a" * 200}, "query"),
                ({"name": 5, "query": "state=registered"}, "name"),
            ]:
                error = await _call(http, "POST", "/v3/device-queries", 400, body)
                assert error["object"] == "error" and field in str(error), (body, error)
            error = await _call(http, "PUT", f"/v3/device-queries/{made['id']}", 400, {"query": "colour=red"})
            assert "colour" in str(error)
            await _call(http, "GET", "/v3/device-queries?colour=red", 400)
            await _call(http, "GET", f"/v3/device-queries/{'0' * 32}", 404)
            await _call(http, "PUT", f"/v3/device-queries/{'0' * 32}", 404, {"name": "y"})

            await _call(http, "DELETE", f"/v3/device-queries/{made['id']}", 204)
            await _call(http, "DELETE", f"/v3/device-queries/{made['id']}", 404)
            await _call(http, "GET", f"/v3/device-queries/{made['id']}", 404)

    run(scenario())


def test_an_account_keeps_at_most_1000_device_queries(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, _session(node) as http:
            for n in range(MAX_PER_ACCOUNT):
                await _call(http, "POST", "/v3/device-queries", 201, {"name": f"q{n}", "query": "state=registered"})
            error = await _call(http, "POST", "/v3/device-queries", 400, {"name": "one more", "query": "id=a"})
            assert "1000" in error["message"]
            page = await _call(http, "GET", "/v3/device-queries?limit=1000&include=total_count", 200)
            assert page["total_count"] == MAX_PER_ACCOUNT and page["has_more"] is False

    run(scenario(), timeout=120)
