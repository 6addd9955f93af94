"""The API edge: what every request passes through before and after its handler, as one middleware.

In order, outermost first: the request id (log lines and the `X-Request-Id` header, logs.py), the request metrics
(metrics.py), the error mapping (errors.py) and the rate limit (rate_limit.py). They were four aiohttp middlewares;
each layer costs a coroutine and a partial per request (issue 15: ~3 % of a device request's service CPU, measured with
bench/rest_bench.py). The order of the four is unchanged: a 429 or a mapped error is a response like any other to the
metrics and the request id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from devicehub.api.errors import Handler, error_response
from devicehub.api.rate_limit import check_rate
from devicehub.api.streamed_errors import answered_in_stream
from devicehub.logs import request_id, request_id_for

access_log = logging.getLogger("devicehub.api.access")


def edge_middleware(record: Callable[[web.Request, int, float], None]) -> Any:
    """The middleware; `record(request, status, started)` counts each request (NodeMetrics.request_recorder)."""

    @web.middleware
    async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
        rid = request_id_for(request)
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500
        try:
            try:
                await check_rate(request)
                response = await handler(request)
            except Exception as error:  # an HTTPException without an error object is raised again, to aiohttp
                response = await answered_in_stream(request, error) or error_response(request, error)
            status = response.status
            if not response.prepared:
                response.headers["X-Request-Id"] = rid
            return response
        except web.HTTPException as exc:
            status = exc.status
            exc.headers["X-Request-Id"] = rid
            raise
        finally:
            record(request, status, started)
            if access_log.isEnabledFor(logging.DEBUG):
                elapsed_ms = (time.perf_counter() - started) * 1000
                access_log.debug("%s %s %d %.1f ms", request.method, request.path, status, elapsed_ms)
            request_id.reset(token)

    return edge
