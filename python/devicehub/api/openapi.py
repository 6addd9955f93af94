"""`GET /openapi.json`, generated from the route table (routes.py) and its msgspec wire models (`/docs`, its
renderer, ships with the console: console/__init__.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec
from aiohttp import web

from devicehub import __version__
from devicehub.api.errors import V3Error
from devicehub.api.route_spec import Route

SPEC = web.AppKey("openapi_document", bytes)


def _operation_id(route: Route) -> str:
    return route.method.lower() + re.sub(r"[^A-Za-z0-9]+", "_", route.path).rstrip("_")


def build_spec(routes: Sequence[Route]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of exactly these routes, schemas from their msgspec models."""
    types: list[Any] = [V3Error]
    for route in routes:
        types.extend(t for t in (route.body, *(r.model for r in route.replies)) if t is not None and t not in types)
    schemas, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    lookup = dict(zip(types, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        parameters = [
            {"name": p.name, "in": "path", "required": True, "description": p.description, "schema": p.schema}
            for p in route.path_params
        ] + [
            {"name": p.name, "in": "query", "required": p.required, "description": p.description, "schema": p.schema}
            for p in route.query
        ]
        responses: dict[str, Any] = {}
        for reply in route.replies:
            entry: dict[str, Any] = {"description": reply.description}
            if reply.model is not None:
                entry["content"] = {"application/json": {"schema": lookup[reply.model]}}
            elif reply.media is not None:
                entry["content"] = {reply.media: {"schema": {"type": "string"}}}
            responses[str(reply.status)] = entry
        # answers every operation may give, wherever it is: the rate limit, and the store refusing changes
        error_content = (
            {"application/json": {"schema": lookup[V3Error]}}
            if route.json_errors
            else {"text/plain": {"schema": {"type": "string"}}}
        )
        responses.setdefault(
            "429",
            {
                "description": "over the rate limit (TOO_MANY_REQUESTS); `Retry-After` says when",
                "content": error_content,
            },
        )
        if route.method != "GET":
            responses.setdefault(
                "503",
                {"description": "the store cannot write right now (STORAGE_UNAVAILABLE)", "content": error_content},
            )
        operation: dict[str, Any] = {
            "operationId": _operation_id(route),
            "summary": route.summary,
            "tags": [route.tag],
            "parameters": parameters,
            "security": [{"bearer": []}] if route.auth else [],
            "responses": responses,
        }
        if route.body is not None:
            operation["requestBody"] = {
                "required": route.body_required,
                "content": {"application/json": {"schema": lookup[route.body]}},
            }
        paths.setdefault(route.path, {})[route.method.lower()] = operation
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
    return web.Response(body=request.app[SPEC], content_type="application/json")
