"""`/openapi.json` documents exactly the routes the application serves, from the one route table (issue 11
item 6): the notification channel API, every status, the device-request query parameters, path patterns."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from devicehub.api.app import add_routes
from devicehub.api.errors import error_middleware, json_errors
from devicehub.api.openapi import build_spec
from devicehub.api.route_spec import Route
from devicehub.api.routes import ROUTES, v2, v3
from devicehub.api.trailing_slash import tolerate_trailing_slash
from devicehub.errors import NotFound
from support.node import run, running_node


async def served_document(tmp_path: Path) -> dict[str, Any]:
    async with running_node(tmp_path) as node, aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as http:
        async with http.get("/openapi.json") as r:
            assert r.status == 200 and r.content_type == "application/json"
            document: dict[str, Any] = await r.json()
    return document


def test_the_document_is_the_route_table_the_router_serves(tmp_path: Path) -> None:
    document: dict[str, Any] = {}

    async def scenario() -> None:
        document.update(await served_document(tmp_path))

    run(scenario())
    assert document == build_spec(ROUTES)
    app = web.Application()
    add_routes(app)
    served = {
        (route.method.lower(), re.sub(r"\{(\w+):\.\+\}", r"{\1}", route.resource.canonical))
        for route in app.router.routes()
        if route.resource is not None and route.method != "HEAD"
    }
    documented = {(method, path) for path, methods in document["paths"].items() for method in methods}
    aliases = {(r.method.lower(), alias) for r in ROUTES for alias in r.aliases}
    assert served - aliases == documented


def test_the_document_covers_channels_statuses_parameters_and_patterns(tmp_path: Path) -> None:
    document: dict[str, Any] = {}

    async def scenario() -> None:
        document.update(await served_document(tmp_path))

    run(scenario())
    paths = document["paths"]
    for channel in ("callback", "websocket", "websocket-connect", "pull", "channel"):
        assert f"/v2/notification/{channel}" in paths, channel
    websocket_put = set(paths["/v2/notification/websocket"]["put"]["responses"])
    assert websocket_put == {"200", "201", "400", "401", "413", "429", "503"}
    request = paths["/v2/device-requests/{device_id}"]["post"]
    assert set(request["responses"]) == {"202", "400", "401", "404", "405", "413", "429", "503"}
    query = {p["name"]: p for p in request["parameters"] if p["in"] == "query"}
    assert query["async-id"]["required"] is True and query["async-id"]["schema"]["pattern"]
    assert query["retry"]["schema"] == {"type": "integer", "minimum": 0, "maximum": 10}
    assert query["expiry-seconds"]["schema"] == {"type": "integer", "minimum": 60, "maximum": 2_592_000}
    listing = {p["name"] for p in paths["/v3/devices"]["get"]["parameters"]}
    assert {"filter", "endpoint_type__eq", "created_at__gte", "host_gateway__nin", "include"} <= listing
    for path, methods in paths.items():
        for method, operation in methods.items():
            for param in operation["parameters"]:
                if param["in"] == "path":
                    assert param["schema"]["pattern"].startswith("^"), (method, path, param["name"])
            if operation["security"]:
                assert "401" in operation["responses"], (method, path)
            assert "429" in operation["responses"], (method, path)  # the rate limit applies everywhere
            if method != "get":
                assert "503" in operation["responses"], (method, path)  # a store that cannot write
            error = operation["responses"].get("404") or operation["responses"].get("400")
            if error is not None and json_errors(path):
                assert error["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/V3Error"}
            elif error is not None:
                assert "text/plain" in error["content"], (method, path)  # v2 errors are text tokens


def test_each_route_answers_errors_in_the_style_its_table_entry_declares() -> None:
    """The route table, not the path's prefix, decides text token or V3Error object; the prefix is for paths no route
    matches. Here a `/v3/` route declares v2 errors and a route outside `/v3/` declares V3Error, over real HTTP."""

    async def missing(request: web.Request) -> web.StreamResponse:
        raise NotFound("nothing here")

    routes = (
        Route("GET", "/v3/oddity", missing, "v2 errors under /v3/", "test", (v2(404, "none"),), auth=False),
        Route("GET", "/plain/{name}", missing, "v3 errors elsewhere", "test", (v3(404, "none"),), auth=False),
    )

    async def scenario() -> None:
        app = web.Application(middlewares=[error_middleware])
        add_routes(app, routes)
        tolerate_trailing_slash(app)
        async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as http:
            async with http.get(server.make_url("/v3/oddity")) as r:
                assert (r.status, r.content_type, await r.text()) == (404, "text/plain", "NOT_FOUND")
            for path in ("/plain/x", "/plain/x/", "/v3/no-such-route"):
                async with http.get(server.make_url(path)) as r:
                    assert (r.status, r.content_type) == (404, "application/json"), path
                    assert (await r.json())["type"] == "not_found"
            async with http.get(server.make_url("/no-such-route")) as r:
                assert (r.status, r.content_type) == (404, "text/plain")
        document = build_spec(routes)
        assert "text/plain" in document["paths"]["/v3/oddity"]["get"]["responses"]["429"]["content"]
        assert "application/json" in document["paths"]["/plain/{name}"]["get"]["responses"]["429"]["content"]

    run(scenario())
