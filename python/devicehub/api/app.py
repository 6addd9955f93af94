"""The aiohttp application: middleware, routes of every API area, health and metrics."""

from __future__ import annotations

from aiohttp import web

from devicehub.api import credential_routes, device_routes, iam_routes, openapi, request_routes, subscription_routes
from devicehub.api.context import SERVICES, Services
from devicehub.api.errors import error_middleware
from devicehub.api.trailing_slash import tolerate_trailing_slash


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text format: channel queues and LwM2M counters."""
    lines: list[str] = []
    for name, value in sorted(request.app[SERVICES].metrics().items()):
        lines.append(f"devicehub_{name} {value}")
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def create_app(services: Services) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=services.settings.max_body_bytes)
    app[SERVICES] = services
    from devicehub.api import bootstrap_routes, notification_routes

    areas = (device_routes, subscription_routes, request_routes, notification_routes, openapi, iam_routes)
    for area in (*areas, credential_routes):
        area.add_routes(app)
    bootstrap_routes.add_routes(app)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    tolerate_trailing_slash(app)  # issue 11: `/v3/devices/{id}/` as the SDK calls it
    return app
