"""Device requests with several nodes on one Redis, as a node's death leaves them (issue 31 #4).

- Request expiry: the loop runs on every node, and a request another node is delivering must not be expired under it
  (two async-responses for one request). Each node expires the requests of the devices it holds; those of a device
  no live node holds (its node died) are expired by the node holding the expiry lease. Two in-process nodes with
  their own manual clocks; their expiry passes are run directly.
- The answer of a request is the last trace of it: publishing an async-response returns once it is in its key's
  inbox in Redis (the request leaves the store after that), so a node killed at any moment leaves the answer or the
  queued request, never neither."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from devicehub.clock import ManualClock
from devicehub.domain.events import AsyncResponseEvent
from devicehub.domain.handover import OBSERVE, DeviceWork
from devicehub.domain.model import DeviceRequest, StoredEvent
from support.apps import websocket_app
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


def test_a_subscription_waiting_for_a_device_that_never_comes_back_is_answered_429_at_its_expiry(
    tmp_path: Path, redis_url: str
) -> None:
    """Issue 31 #4's leftover: an observe left waiting for a device no live node holds (its node died) was never
    answered when the device did not come back. The nodes' own expiry passes (once a second each) answer it
    REQUEST_EXPIRED past its expiry, on the application's channel, once, and leave nothing waiting."""

    async def scenario() -> None:
        async with (
            running_node(tmp_path / "a", redis_url=redis_url, node_id="node-a") as a,
            running_node(tmp_path / "b", redis_url=redis_url, node_id="node-b") as b,
            websocket_app(b) as (_, events),
        ):
            assert a.holders is not None and b.holders is not None
            key_id = (await b.accounts.authenticate(b.dev_api_key)).key_id
            client = aioredis.Redis.from_url(redis_url)
            try:
                await client.set("devicehub:holder:{dev:held-by-dead}", "node-dead")  # its node's heartbeat is gone
                observe = DeviceWork(OBSERVE, "held-by-dead", key_id, "/3/0/9", "s1", time.time() + 1.5)
                assert await b.holders.hand_over(observe)  # it waits for the device
                assert await client.llen("devicehub:pending:{dev:held-by-dead}") == 1
                answer = await events.wait_for("async-responses", lambda e: e["id"] == "s1")
                assert time.time() >= observe.expires_at  # not before its expiry
                assert (answer["status"], answer["error"]) == (429, "REQUEST_EXPIRED")
                swept = [node.holders.metrics()["handover_expired"] for node in (a, b) if node.holders]
                assert sorted(swept) == [0, 1]  # by one node, whichever's pass came first
                assert await client.llen("devicehub:pending:{dev:held-by-dead}") == 0
                assert await client.zcard("devicehub:waiting:{waiting}") == 0  # nothing left to answer again
            finally:
                await client.aclose()

    run(scenario())


def test_an_async_response_is_published_only_once_it_is_in_redis(tmp_path: Path, redis_url: str) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=redis_url) as node, websocket_app(node) as (_, events):
            ownership = node.hub._ownership
            assert ownership is not None
            cluster = ownership.cluster
            forward, entered, gate = cluster.forward, asyncio.Event(), asyncio.Event()

            async def held(batches: dict[str, list[StoredEvent]]) -> None:  # Redis slow to answer
                entered.set()
                await gate.wait()
                await forward(batches)

            cluster.forward = held  # type: ignore[method-assign]
            caller = await node.accounts.authenticate(node.dev_api_key)
            publish = asyncio.ensure_future(
                node.hub.publish([caller.key_id], AsyncResponseEvent(async_id="a1", status=200))
            )
            await entered.wait()
            assert not publish.done()  # not in Redis yet: the request must stay queued meanwhile
            gate.set()
            await publish
            assert (await events.wait_for("async-responses", lambda e: e["id"] == "a1"))["status"] == 200

    run(scenario())
