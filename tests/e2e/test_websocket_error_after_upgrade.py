"""An error after the WebSocket upgrade ends the socket with a close frame, never with an HTTP response in the frame
stream. The case behind test_cluster_front's intermittent "Received frame with non-zero reserved bits": the node the
socket reached could not take the channel over (its owner did not hand it over within the lease time), raised
CHANNEL_BUSY after the 101, and the API edge's 503 answer was written into the upgraded connection; the client read
"HTTP/1.1 503" as a frame header ('H' = 0x48: RSV1 set, RFC 6455 §5.2). Here the owner is made deterministic: the
channel's lease belongs to a node that does not exist and so never answers the release request."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest
import redis

from devicehub.channels.cluster import LEASE_TTL
from support.service import ServiceProcess
from support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

UNEXPECTED = 1011  # spec §7: any other unexpected close by the server, with a reason string


def test_a_socket_whose_channel_cannot_be_taken_over_is_closed_1011_with_the_reason(
    redis_url: str, tmp_path: Path
) -> None:
    node = ServiceProcess(data_dir=tmp_path / "a", extra_args=("--redis-url", redis_url, "--node-id", "node-a"))
    node.start()
    try:
        asyncio.run(asyncio.wait_for(_scenario(node, redis_url), 60))
    finally:
        node.stop()


async def _scenario(node: ServiceProcess, url: str) -> None:
    headers = {"Authorization": f"Bearer {node.api_key}"}
    async with aiohttp.ClientSession(base_url=node.base_url, headers=headers) as http:
        async with http.put("/v2/notification/websocket") as r:
            assert r.status == 201
        client = redis.Redis.from_url(url, decode_responses=True)
        try:
            leases = [key for key in client.scan_iter("*lease*") if "channel:" in key]  # store/redis/keys.py
            assert len(leases) == 1, leases
            # another node owns the channel from now on, for an hour, and answers nothing
            client.hset(leases[0], mapping={"owner": "node-gone", "expires_at": repr(time.time() + 3600)})
        finally:
            client.close()
        # node-a's lease upkeep sees the lease lost and lets its channel go (channels/ownership.py)
        wait_until(lambda: any("lost the lease" in line for line in node.output), within=LEASE_TTL * 2, what="hand-off")

        ws = await http.ws_connect("/v2/notification/websocket-connect")
        try:
            message = await ws.receive(timeout=LEASE_TTL + 2 + 10)  # own(take_over=True) gives up after TTL + 2 s
            assert message.type is aiohttp.WSMsgType.CLOSE, message  # on main: ERROR, non-zero reserved bits
            assert message.data == UNEXPECTED
            assert message.extra.startswith("CHANNEL_BUSY"), message.extra
        finally:
            await ws.close()
