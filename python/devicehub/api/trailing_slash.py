"""Every route answers with and without a trailing slash (Pelion's swagger paths end in `/`, the SDK calls them).

Done once, where paths are resolved: a path that matches no route is tried again with its trailing slash removed
(or added), so the route table keeps one entry per operation (the OpenAPI document is generated from it) and no
client is redirected (a redirect would cost a round trip and some clients do not repeat a PUT body).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web
from aiohttp.web_urldispatcher import UrlMappingMatchInfo

Resolve = Callable[[web.Request], Coroutine[Any, Any, UrlMappingMatchInfo]]


def either_slash(resolve: Resolve) -> Resolve:
    """`resolve`, retried with the other spelling of the trailing slash when the path as sent matches no route."""

    async def resolve_either(request: web.Request) -> UrlMappingMatchInfo:
        match = await resolve(request)
        path = request.rel_url.path
        if match.http_exception is None or path == "/":
            return match
        other = path.rstrip("/") if path.endswith("/") else path + "/"
        if not other:
            return match
        alternative = await resolve(request.clone(rel_url=request.rel_url.with_path(other)))
        if alternative.http_exception is None:
            return alternative
        # both spellings known but not for this method: answer 405 with the methods of either
        if match.http_exception.status == 404 and alternative.http_exception.status == 405:
            return alternative
        return match

    return resolve_either


def tolerate_trailing_slash(app: web.Application) -> None:
    """Install the slash-tolerant resolution on the application's router (before the app starts)."""
    app.router.resolve = either_slash(app.router.resolve)  # type: ignore[method-assign,assignment]
