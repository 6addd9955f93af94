"""The one place errors become HTTP responses: a v2 text token or a v3 JSON error object, as the route declares."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import msgspec
from aiohttp import web

from devicehub.api.streamed_errors import answered_in_stream
from devicehub.errors import (
    DevicehubError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    StorageUnavailable,
)
from devicehub.ids import new_id
from devicehub.logs import request_id as current_request_id  # the id on this request's log lines
from devicehub.outages import unreachable

log = logging.getLogger("devicehub.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FieldMessage(msgspec.Struct, frozen=True):
    name: str
    message: str


class V3Error(msgspec.Struct, frozen=True, omit_defaults=True):
    object: str
    code: int
    type: str
    message: str
    request_id: str
    fields: list[FieldMessage] = []


_encoder = msgspec.json.Encoder()


# The paths (aiohttp's canonical form, as routes.py writes them) whose operations declare V3Error replies; the app
# fills it from the route table (app.py add_routes), so the table decides each route's error style.
JSON_ERROR_ROUTES = web.AppKey("json_error_routes", frozenset[str])
# For a path that matches no route: Pelion's bootstrap API (`/v2/device-shared-keys`) answers JSON error objects
# like v3, unlike the rest of v2
JSON_ERROR_PREFIXES = ("/v3/", "/admin/", "/v2/device-shared-keys")


def json_errors(path: str) -> bool:
    """Whether errors on `path`, which no route matched, are V3Error JSON objects (else a v2 text/plain token)."""
    return path.startswith(JSON_ERROR_PREFIXES)


def _json_errors(request: web.Request) -> bool:
    resource = request.match_info.route.resource
    if resource is None:  # no route matched (404, 405)
        return json_errors(request.path)
    return resource.canonical in request.app.get(JSON_ERROR_ROUTES, frozenset())


def render(request: web.Request, error: DevicehubError) -> web.Response:
    response = _render(request, error)
    if isinstance(error, RateLimited):
        response.headers["Retry-After"] = str(error.retry_after)
    return response


def _render(request: web.Request, error: DevicehubError) -> web.Response:
    if _json_errors(request):
        body = V3Error(
            object="error",
            code=error.status,
            type=error.type,
            message=error.message,
            request_id=current_request_id.get() if current_request_id.get() != "-" else new_id(),
            fields=[FieldMessage(f.name, f.message) for f in error.fields] if error.status == 400 else [],
        )
        return web.Response(status=error.status, body=_encoder.encode(body), content_type="application/json")
    return web.Response(status=error.status, text=error.token, content_type="text/plain")


def _from_http(exc: web.HTTPException) -> DevicehubError | None:
    if exc.status == 404:
        return NotFound("no such path")
    if exc.status == 405:
        return MethodNotAllowed("method not allowed")
    if exc.status == 413:
        return PayloadTooLarge("request body is larger than the limit")
    return None


def error_response(request: web.Request, error: Exception) -> web.Response:
    """The response for an error a handler raised; re-raises an HTTPException that maps to no error object (a
    redirect, a status below 400): aiohttp answers that one itself."""
    if isinstance(error, DevicehubError):
        return render(request, error)
    if isinstance(error, web.HTTPException):
        mapped = _from_http(error)
        if mapped is None or error.status < 400:
            raise error
        response = render(request, mapped)
        if isinstance(error, web.HTTPMethodNotAllowed):
            response.headers["Allow"] = ",".join(sorted(error.allowed_methods))
        return response
    if unreachable(error):  # Redis down or not answering: the store is unavailable, not the request wrong
        log.warning("store unreachable on %s %s: %s", request.method, request.path, error)
        return render(request, StorageUnavailable("the store does not answer; retry later"))
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=error)
    return render(request, DevicehubError("unexpected error; see the service log"))


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The error mapping alone, for an application without the API edge (edge.py)."""
    try:
        return await handler(request)
    except Exception as error:
        return await answered_in_stream(request, error) or error_response(request, error)
