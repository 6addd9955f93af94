"""A node taking a channel over for a new socket asks again while the lease stays taken (channels/ownership.py).

Behind the front (test_cluster_front), the socket's node asked the owner once; the owner released, and before the
asker's next poll a lease upkeep turn (another node's, or the old owner's) adopted the ownerless channel. Nobody
asked that holder, the asker gave up after the lease time and the socket got CHANNEL_BUSY. Here the holders are this
test, on the cluster's real control channel: the first request moves the lease to another node (the adoption in
between), and only a request that comes after it hands the channel over."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from devicehub.channels.cluster import LEASE_TTL
from support.service import ServiceProcess
from support.waiting import eventually, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

CONTROL = "devicehub:control"  # channels/cluster.py: the nodes' control channel under the default key prefix


def test_a_channel_adopted_by_a_third_node_meanwhile_is_still_taken_over(redis_url: str, tmp_path: Path) -> None:
    node = ServiceProcess(data_dir=tmp_path / "a", extra_args=("--redis-url", redis_url, "--node-id", "node-a"))
    node.start()
    try:
        asyncio.run(asyncio.wait_for(_scenario(node, redis_url), 60))
    finally:
        node.stop()


async def _scenario(node: ServiceProcess, url: str) -> None:
    headers = {"Authorization": f"Bearer {node.api_key}"}
    client = aioredis.Redis.from_url(url, decode_responses=True)
    pubsub = client.pubsub()
    try:
        async with aiohttp.ClientSession(base_url=node.base_url, headers=headers) as http:
            async with http.put("/v2/notification/websocket") as r:
                assert r.status == 201
            lease = [key async for key in client.scan_iter("*lease*") if "channel:" in key]
            assert len(lease) == 1, lease
            await client.hset(lease[0], mapping={"owner": "node-b", "expires_at": repr(time.time() + 3600)})
            wait_until(lambda: any("lost the lease" in line for line in node.output), within=LEASE_TTL * 2)

            await pubsub.ssubscribe(CONTROL)
            holders = asyncio.create_task(_hand_over_on_the_second_request(pubsub, client, lease[0]))
            ws = await http.ws_connect("/v2/notification/websocket-connect")
            try:
                asked = await asyncio.wait_for(holders, LEASE_TTL + 2)  # on main: asked once, then CHANNEL_BUSY
                assert asked == 2

                async def connected() -> bool:
                    async with http.get("/v2/notification/websocket") as r:
                        return r.status == 200 and (await r.json())["status"] == "connected"

                await eventually(connected, within=5)
                assert not ws.closed
                assert await client.hget(lease[0], "owner") == "node-a"
            finally:
                await ws.close()
    finally:
        await pubsub.aclose()
        await client.aclose()


async def _hand_over_on_the_second_request(pubsub: aioredis.client.PubSub, client: aioredis.Redis, lease: str) -> int:
    """node-b releases on the first request, and node-c adopts the channel before the asker polls; node-c releases
    on the next request. Returns the number of requests seen."""
    asked = 0
    while asked < 2:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        if message is None or not str(message["data"]).startswith("release "):
            continue
        asked += 1
        if asked == 1:
            await client.hset(lease, mapping={"owner": "node-c", "expires_at": repr(time.time() + 3600)})
        else:
            await client.delete(lease)
    return asked
