"""A new socket for a key whose channel another node owns (Redis mode): the takeover (channels/ownership.py) and what
the socket gets when it fails. One real `devicehub serve` node on a real Redis; the other nodes are this test, which
moves the channel's lease in Redis and answers (or not) on the cluster's real control channel.

Behind the front (test_cluster_front, about one run in six under load) both went wrong together: the socket's node
asked the owner to release once; the owner released, and before the asker's next poll a lease upkeep turn (another
node's, or the old owner's) adopted the ownerless channel. Nobody asked that holder, so the asker gave up after the
lease time with CHANNEL_BUSY, after the 101, and the API edge's 503 answer was written into the upgraded connection;
the client read "HTTP/1.1 503" as a frame header ('H' = 0x48: RSV1 set, RFC 6455 §5.2): "Received frame with
non-zero reserved bits"."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from devicehub.channels.cluster import LEASE_TTL
from support.service import ServiceProcess
from support.waiting import eventually, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

CONTROL = "devicehub:control"  # channels/cluster.py: the nodes' control channel under the default key prefix
UNEXPECTED = 1011  # spec §7: any other unexpected close by the server, with a reason string
# what a test does once the channel is owned elsewhere: (client session on node-a, Redis, the lease key)
Scenario = Callable[[aiohttp.ClientSession, aioredis.Redis, str], Awaitable[None]]


def test_a_channel_adopted_by_a_third_node_meanwhile_is_still_taken_over(redis_url: str, tmp_path: Path) -> None:
    """The first release request moves the lease to another node (the adoption in between); only a request that
    comes after it hands the channel over, so the asker must ask again while the lease stays taken."""

    async def scenario(http: aiohttp.ClientSession, client: aioredis.Redis, lease: str) -> None:
        pubsub = client.pubsub()
        try:
            await pubsub.ssubscribe(CONTROL)
            holders = asyncio.create_task(_hand_over_on_the_second_request(pubsub, client, lease))
            ws = await http.ws_connect("/v2/notification/websocket-connect")
            try:
                asked = await asyncio.wait_for(holders, LEASE_TTL + 2)  # before: asked once, then CHANNEL_BUSY
                assert asked == 2

                async def connected() -> bool:
                    async with http.get("/v2/notification/websocket") as r:
                        return r.status == 200 and (await r.json())["status"] == "connected"

                await eventually(connected, within=5)
                assert not ws.closed
                assert await client.hget(lease, "owner") == "node-a"
            finally:
                await ws.close()
        finally:
            await pubsub.aclose()

    _run(redis_url, tmp_path, owner="node-b", scenario=scenario)


def test_a_socket_whose_channel_cannot_be_taken_over_is_closed_1011_with_the_reason(
    redis_url: str, tmp_path: Path
) -> None:
    """The lease belongs to a node that does not exist and so never answers: the socket ends with a close frame,
    1011 and CHANNEL_BUSY, never with an HTTP answer inside the socket."""

    async def scenario(http: aiohttp.ClientSession, client: aioredis.Redis, lease: str) -> None:
        ws = await http.ws_connect("/v2/notification/websocket-connect")
        try:
            message = await ws.receive(timeout=LEASE_TTL + 2 + 10)  # own(take_over=True) gives up after TTL + 2 s
            assert message.type is aiohttp.WSMsgType.CLOSE, message  # before: ERROR, non-zero reserved bits
            assert message.data == UNEXPECTED
            assert message.extra.startswith("CHANNEL_BUSY"), message.extra
        finally:
            await ws.close()

    _run(redis_url, tmp_path, owner="node-gone", scenario=scenario)


def _run(redis_url: str, tmp_path: Path, *, owner: str, scenario: Scenario) -> None:
    node = ServiceProcess(data_dir=tmp_path / "a", extra_args=("--redis-url", redis_url, "--node-id", "node-a"))
    node.start()
    try:

        async def run() -> None:
            async with _channel_owned_by(node, redis_url, owner) as (http, client, lease):
                await scenario(http, client, lease)

        asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        node.stop()


@asynccontextmanager
async def _channel_owned_by(
    node: ServiceProcess, url: str, owner: str
) -> AsyncIterator[tuple[aiohttp.ClientSession, aioredis.Redis, str]]:
    """The key's WebSocket channel, made on node-a, then owned by `owner` for an hour (its lease moved in Redis);
    node-a's lease upkeep has seen it lost and let the channel go."""
    headers = {"Authorization": f"Bearer {node.api_key}"}
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        async with aiohttp.ClientSession(base_url=node.base_url, headers=headers) as http:
            async with http.put("/v2/notification/websocket") as r:
                assert r.status == 201
            leases = [key async for key in client.scan_iter("*lease*") if "channel:" in key]  # store/redis/keys.py
            assert len(leases) == 1, leases
            await client.hset(leases[0], mapping={"owner": owner, "expires_at": repr(time.time() + 3600)})
            wait_until(lambda: any("lost the lease" in line for line in node.output), within=LEASE_TTL * 2)
            yield http, client, leases[0]
    finally:
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
