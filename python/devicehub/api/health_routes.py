"""Liveness (`/healthz`, `/health`), readiness (`/readyz`) and Prometheus metrics (`/metrics`): no API key."""

from __future__ import annotations

import asyncio

import msgspec
from aiohttp import web

from devicehub.api.context import SERVICES
from devicehub.metrics import CONTENT_TYPE, NodeMetrics

METRICS = web.AppKey("metrics", NodeMetrics)
READY_TIMEOUT_S = 2.0


class Health(msgspec.Struct, frozen=True):
    status: str


class SecurityPolicy(msgspec.Struct, frozen=True):
    """How devices may connect (issue 13 #4): DTLS on a port, TLS over TCP on a port, whether plain CoAP is accepted."""

    dtls: bool
    coaps_port: int | None
    allow_nosec: bool
    coaps_tcp_port: int | None = None


class Readiness(msgspec.Struct, frozen=True):
    status: str  # "ok" | "unavailable"
    checks: dict[str, str]  # check name → "ok" or why it fails
    security: SecurityPolicy | None = None


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process answers HTTP (`/health` is the older name)."""
    return web.Response(body=msgspec.json.encode(Health("ok")), content_type="application/json")


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
    policy = msgspec.convert(services.security(), SecurityPolicy) if services.security is not None else None
    body = Readiness("ok" if ready else "unavailable", checks, policy)
    return web.Response(status=200 if ready else 503, body=msgspec.json.encode(body), content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    """Prometheus exposition format (prometheus-client), this node's registry only."""
    body = await request.app[METRICS].scrape()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
