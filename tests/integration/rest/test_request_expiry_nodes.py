"""Request expiry with several nodes on one Redis (issue 31 #4): the expiry loop runs on every node, and a request
another node is delivering must not be expired under it (two async-responses for one request). Each node expires
the requests of the devices it holds; those of a device no live node holds (its node died) are expired by the node
holding the expiry lease. Two in-process nodes with their own manual clocks; their expiry passes are run directly."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis

from devicehub.clock import ManualClock
from devicehub.domain.model import DeviceRequest
from support.node import run, running_node

pytestmark = pytest.mark.redis


def _expired(device_id: str, async_id: str, now: float) -> DeviceRequest:
    return DeviceRequest(
        async_id=async_id,
        key_id="k1",
        account_id="acc",
        device_id=device_id,
        method="GET",
        uri="/3/0/0",
        created_at=now - 120,
        expires_at=now - 60,
    )


def test_an_expired_request_is_expired_by_its_devices_holder_or_for_a_dead_holders_device_by_one_node(
    tmp_path: Path, redis_url: str
) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path / "a", clock=ManualClock(), redis_url=redis_url, node_id="node-a") as a,
            running_node(tmp_path / "b", clock=ManualClock(), redis_url=redis_url, node_id="node-b") as b,
        ):
            assert a.holders is not None and b.holders is not None
            await a.holders.took(["held-by-a"])
            client = aioredis.Redis.from_url(redis_url)
            try:  # a device whose node died: its holder record names a node whose heartbeat is gone
                await client.set("devicehub:holder:{dev:held-by-dead}", "node-dead")
            finally:
                await client.aclose()
            now = b.clock.now()
            await b.store.enqueue_request(_expired("held-by-a", "r1", now))
            await b.store.enqueue_request(_expired("held-by-dead", "r2", now))

            await b.devices.requests._expire()  # node A holds the first device: node B leaves its request to A
            assert [r.async_id for r in await b.store.pending_requests("held-by-a")] == ["r1"]
            assert await b.store.pending_requests("held-by-dead") == []  # no live holder: B (the lease) expires it
            await a.devices.requests._expire()
            assert await a.store.pending_requests("held-by-a") == []

    run(scenario())
