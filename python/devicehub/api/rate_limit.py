"""Per-key REST request rate limit (issue 14 #14): a token bucket per API key, 429 with `Retry-After` beyond it.

Every request counts, the health and metrics probes and the WebSocket connect included. The key is resolved once
per request (the handler reuses the principal): a key that authenticates has one bucket, whether it comes as a
bearer token or a WebSocket sub-protocol; a request without a key, or with one that does not authenticate, counts
against its client address (a made-up key on each request is no fresh bucket). Nothing is exempt unless the operator
turns the limit off (`--rate-limit 0`)."""

from __future__ import annotations

from aiohttp import web

from devicehub.api.context import authenticate, presented_key
from devicehub.errors import RateLimited
from devicehub.ratelimit import TokenBuckets

RATE_LIMITS = web.AppKey("rate_limits", TokenBuckets)


async def _bucket(request: web.Request) -> str:
    raw_key = presented_key(request)
    if raw_key:
        try:
            caller = await authenticate(request, raw_key)
        except Exception:  # the handler meets the same error again, if it asks for the caller
            pass
        else:
            return f"key:{caller.key_id}"
    return f"addr:{request.remote}"


async def check_rate(request: web.Request) -> None:
    """Raises RateLimited (429 with Retry-After) when the caller's bucket is empty; the API edge asks before every
    handler (edge.py)."""
    buckets = request.app[RATE_LIMITS]
    if buckets.rate > 0:
        wait = buckets.take(await _bucket(request))
        if wait:
            raise RateLimited(buckets.retry_after(wait))
