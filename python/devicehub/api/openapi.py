"""`GET /openapi.json`, generated from the route table and the msgspec wire models, and a `/docs` page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from devicehub import __version__
from devicehub.api import models


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    path: str
    summary: str
    status: int
    response: Any = None
    request: Any = None
    tag: str = "devices"


OPERATIONS = (
    Operation("get", "/v3/devices", "List the account's devices", 200, models.DeviceList),
    Operation("get", "/v3/devices/{device_id}", "One device", 200, models.DeviceModel),
    Operation("get", "/v3/devices/{device_id}/echo", "Device state snapshot (spec §2.4)", 200, models.DeviceEcho),
    Operation("get", "/v2/endpoints/{device_id}", "Resources of a device", 200, list[models.EndpointResource]),
    Operation(
        "put",
        "/v2/subscriptions/{device_id}/{path}",
        "Subscribe to a resource (wildcard `*` allowed)",
        202,
        models.AsyncIdResponse,
        tag="subscriptions",
    ),
    Operation("get", "/v2/subscriptions/{device_id}/{path}", "Is the resource subscribed", 200, tag="subscriptions"),
    Operation("delete", "/v2/subscriptions/{device_id}/{path}", "Unsubscribe", 204, tag="subscriptions"),
    Operation("get", "/v2/subscriptions/{device_id}", "Subscribed paths (text/uri-list)", 200, tag="subscriptions"),
    Operation("delete", "/v2/subscriptions/{device_id}", "Remove the device's subscriptions", 204, tag="subscriptions"),
    Operation(
        "put",
        "/v2/subscriptions",
        "Replace the key's presubscription rules",
        202,
        request=list[models.PresubscriptionBody],
        tag="subscriptions",
    ),
    Operation(
        "get",
        "/v2/subscriptions",
        "The key's presubscription rules",
        200,
        list[models.PresubscriptionBody],
        tag="subscriptions",
    ),
    Operation("delete", "/v2/subscriptions", "Remove every presubscription rule", 204, tag="subscriptions"),
    Operation(
        "post",
        "/v2/device-requests/{device_id}",
        "Queue a device request; result as async-response",
        202,
        request=models.DeviceRequestBody,
        tag="device-requests",
    ),
)


def _path_params(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in names]


def build_spec(extra: tuple[Operation, ...] = ()) -> dict[str, Any]:
    operations = OPERATIONS + extra
    types = [t for op in operations for t in (op.response, op.request) if t is not None]
    schemas, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    lookup = dict(zip(types, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        entry: dict[str, Any] = {
            "summary": op.summary,
            "tags": [op.tag],
            "parameters": _path_params(op.path),
            "security": [{"bearer": []}],
            "responses": {
                str(op.status): {"description": "success"},
                "401": {"description": "missing or unknown API key"},
            },
        }
        if op.response is not None:
            entry["responses"][str(op.status)]["content"] = {"application/json": {"schema": lookup[op.response]}}
        if op.request is not None:
            entry["requestBody"] = {"required": True, "content": {"application/json": {"schema": lookup[op.request]}}}
        paths.setdefault(op.path, {})[op.method] = entry
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "devicehub",
            "version": __version__,
            "description": "Pelion Device Management compatible device management API",
        },
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


async def openapi_json(request: web.Request) -> web.Response:
    from devicehub.api.bootstrap_routes import OPERATIONS as BOOTSTRAP  # imports Operation from here

    return web.Response(body=msgspec.json.encode(build_spec(BOOTSTRAP)), content_type="application/json")


async def docs(request: web.Request) -> web.Response:
    from devicehub.api import console  # the renderer ships with the console's static files

    return await console.docs(request)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/openapi.json", openapi_json)
    app.router.add_get("/docs", docs)
