"""The aiohttp application: middleware, routes of every API area, health and metrics."""

from __future__ import annotations

import asyncio

from aiohttp import web

from devicehub.api import (
    console,
    credential_routes,
    device_routes,
    iam_routes,
    openapi,
    request_routes,
    subscription_routes,
)
from devicehub.api.context import SERVICES, Services
from devicehub.api.errors import error_middleware
from devicehub.api.rate_limit import RATE_LIMITS, rate_limit_middleware
from devicehub.api.trailing_slash import tolerate_trailing_slash
from devicehub.logs import quiet_bad_requests, request_id_middleware
from devicehub.metrics import CONTENT_TYPE, NodeMetrics
from devicehub.ratelimit import TokenBuckets

METRICS = web.AppKey("metrics", NodeMetrics)
READY_TIMEOUT_S = 2.0


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process answers HTTP (`/health` is the older name)."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: the store answers and the LwM2M listener is bound; 503 with the failing checks otherwise."""
    services = request.app[SERVICES]
    checks: dict[str, str] = {}
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await services.store.get_account("readyz-probe")
        checks["store"] = "ok"
    except Exception as error:  # any store failure makes the node unready; the reason goes in the body
        checks["store"] = f"failing: {type(error).__name__}: {error}"[:200]
    lwm2m = services.extra_metrics() if services.extra_metrics is not None else {}
    checks["lwm2m_listener"] = "ok" if "coap_received" in lwm2m else "not bound"
    ready = all(state == "ok" for state in checks.values())
    return web.json_response(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
    )


async def metrics(request: web.Request) -> web.Response:
    """Prometheus exposition format (prometheus-client), this node's registry only."""
    body = await request.app[METRICS].scrape()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def create_app(services: Services) -> web.Application:
    quiet_bad_requests()
    node_metrics = NodeMetrics(services)
    # the callback client feeds callback latency; it lives in the hub, which keeps it private
    client = getattr(services.hub, "_client", None)
    if client is not None:
        client.on_answer = node_metrics.callback_answered
    settings = services.settings
    app = web.Application(
        middlewares=[request_id_middleware(), node_metrics.middleware(), error_middleware, rate_limit_middleware],
        client_max_size=settings.max_body_bytes,
    )
    app[SERVICES] = services
    app[METRICS] = node_metrics
    app[RATE_LIMITS] = TokenBuckets(services.clock, settings.rate_limit, settings.rate_limit_burst)
    from devicehub.api import bootstrap_routes, notification_routes

    areas = (device_routes, subscription_routes, request_routes, notification_routes, openapi, iam_routes)
    for area in (*areas, credential_routes):
        area.add_routes(app)
    bootstrap_routes.add_routes(app)
    app.router.add_get("/health", healthz)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    console.add_routes(app)
    tolerate_trailing_slash(app)  # issue 11: `/v3/devices/{id}/` as the SDK calls it
    return app
