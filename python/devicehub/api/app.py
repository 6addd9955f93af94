"""The aiohttp application: middleware, every route of the route table (routes.py), and the console."""

from __future__ import annotations

import msgspec
from aiohttp import web

from devicehub.api import console, notification_routes, openapi
from devicehub.api.context import SERVICES, Services
from devicehub.api.directory_entries import DIRECTORY_ENTRIES, DirectoryEntries
from devicehub.api.edge import edge_middleware
from devicehub.api.errors import JSON_ERROR_ROUTES
from devicehub.api.health_routes import METRICS
from devicehub.api.rate_limit import RATE_LIMITS
from devicehub.api.route_spec import Route
from devicehub.api.routes import ROUTES
from devicehub.api.trailing_slash import tolerate_trailing_slash
from devicehub.api.usage_routes import usage_recorder
from devicehub.logs import quiet_bad_requests
from devicehub.metrics import NodeMetrics
from devicehub.ratelimit import TokenBuckets

# aiohttp's default request-line limit is 8190 bytes; a directory query with many filters can be longer
MAX_REQUEST_LINE = 65536


def add_routes(app: web.Application, routes: tuple[Route, ...] = ROUTES) -> None:
    """Serve each route (and its aliases) and the OpenAPI document of the same table."""
    for route in routes:
        for path in (route.path, *route.aliases):
            app.router.add_route(route.method, route.router_path(path), route.handler)
    app[JSON_ERROR_ROUTES] = frozenset(p for route in routes if route.json_errors for p in (route.path, *route.aliases))
    app[openapi.SPEC] = msgspec.json.encode(openapi.build_spec(routes))


def create_app(services: Services) -> web.Application:
    quiet_bad_requests()
    node_metrics = NodeMetrics(services)
    if services.hub is not None:
        client = services.hub.callback_client
        if client is not None:  # the callback client feeds callback latency
            client.on_answer = node_metrics.callback_answered
        services.hub.counters.on_delivered = node_metrics.events_delivered
    settings = services.settings
    app = web.Application(
        middlewares=[edge_middleware(usage_recorder(node_metrics.request_recorder(), services.usage))],
        client_max_size=settings.max_body_bytes,
        handler_args={"max_line_size": MAX_REQUEST_LINE},
    )
    app[SERVICES] = services
    app[METRICS] = node_metrics
    app[DIRECTORY_ENTRIES] = DirectoryEntries()
    app[RATE_LIMITS] = TokenBuckets(services.clock, settings.rate_limit, settings.rate_limit_burst)
    add_routes(app)
    console.add_routes(app)  # the operator console's page and static files (not API operations)
    app.on_shutdown.append(notification_routes.release_clients)
    tolerate_trailing_slash(app)  # issue 11: `/v3/devices/{id}/` as the SDK calls it
    return app
