"""What one HTTP operation declares (method, path, handler, parameters, replies): the shape the route table
(routes.py) is written in and the OpenAPI document (openapi.py) is generated from."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from devicehub.api.errors import V3Error

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Reply:
    """One status an operation answers; `model` is the msgspec type of a JSON body, `media` a non-JSON one."""

    status: int
    description: str
    model: Any = None
    media: str | None = None


@dataclass(frozen=True, slots=True)
class Param:
    """A query or path parameter; `schema` is its JSON Schema (pattern, bounds, enum)."""

    name: str
    schema: dict[str, Any]
    description: str
    required: bool = False
    spans_segments: bool = False  # a path parameter that may hold `/` (a resource path)


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # OpenAPI form: /v2/subscriptions/{device_id}/{path}
    handler: Handler
    summary: str
    tag: str
    replies: tuple[Reply, ...]
    body: Any = None  # msgspec type of the JSON request body
    body_required: bool = True
    query: tuple[Param, ...] = ()
    path_params: tuple[Param, ...] = ()
    auth: bool = True
    aliases: tuple[str, ...] = field(default=())  # further paths served by the same handler, not documented

    @property
    def json_errors(self) -> bool:
        """Whether this operation's errors are V3Error JSON objects (else v2 text tokens), as its replies declare."""
        return any(reply.model is V3Error for reply in self.replies)

    def router_path(self, path: str | None = None) -> str:
        """The aiohttp form: parameters that span segments may hold `/` but not end with one, so a trailing slash
        is left to the one mechanism every route shares (trailing_slash.py)."""
        result = path or self.path
        for param in self.path_params:
            if param.spans_segments:
                result = result.replace("{" + param.name + "}", "{" + param.name + ":.*[^/]}")
        return result
