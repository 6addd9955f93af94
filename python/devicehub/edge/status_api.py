"""`GET /status` on the local port (spec §4.9, §7): 200 with the record; 400 for a query or an unparsable
URI, 404 for other paths, 405 with `Allow: GET` for other methods. No authentication (spec §5.7)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from devicehub.edge.status import EdgeStatus

STATUS = web.AppKey("edge_status", EdgeStatus)


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"code": status, "message": message}, status=status, headers=headers)


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed:
        return _error(405, f"{request.method} is not allowed; use GET", Allow="GET")
    except web.HTTPNotFound:
        return _error(404, f"no such path: {request.path}")


async def status(request: web.Request) -> web.Response:
    if request.method != "GET":
        return _error(405, f"{request.method} is not allowed; use GET", Allow="GET")
    if request.query_string or "?" in request.raw_path:
        return _error(400, "GET /status takes no parameters")
    return web.Response(body=request.app[STATUS].body(), content_type="application/json")


def create_status_app(edge_status: EdgeStatus) -> web.Application:
    app = web.Application(middlewares=[_errors])
    app[STATUS] = edge_status
    app.router.add_route("*", "/status", status)
    return app
