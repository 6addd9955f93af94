"""Per-key REST request rate limit (issue 14 #14): a token bucket per API key, 429 with `Retry-After` beyond it.

Every request counts, the health and metrics probes and the WebSocket connect included: a request without a key
counts against its client address. Nothing is exempt unless the operator turns the limit off (`--rate-limit 0`)."""

from __future__ import annotations

import hashlib

from aiohttp import web

from devicehub.api.context import bearer_token
from devicehub.api.errors import Handler
from devicehub.errors import RateLimited
from devicehub.ratelimit import TokenBuckets

RATE_LIMITS = web.AppKey("rate_limits", TokenBuckets)


def _key(request: web.Request) -> str:
    token = bearer_token(request) or _websocket_key(request)
    if token:  # kept as a digest: the table holds no secret
        return hashlib.blake2b(token.encode(), digest_size=16).hexdigest()
    return f"addr:{request.remote}"


def _websocket_key(request: web.Request) -> str:
    # the WebSocket connect may carry the key as a subprotocol (service-spec §4.7 note 3)
    protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    return next((p for p in protocols if p.lower() != "wss"), "")


@web.middleware
async def rate_limit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    buckets = request.app[RATE_LIMITS]
    wait = buckets.take(_key(request))
    if wait:
        raise RateLimited(buckets.retry_after(wait))
    return await handler(request)
