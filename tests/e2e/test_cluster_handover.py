"""Device-bound work reaches the device from any node (issue 31 #1): two `devicehub serve` processes on one real
Redis; a simulated device registers on node B (with a long lifetime: it sends no Update during a test); a device
request and a subscription sent to node A reach it through B, and the answers reach the application's WebSocket,
which is on node A. With B gone, the work waits for the device's next contact, and A counts it."""

from __future__ import annotations

import asyncio
import base64
import re
import signal
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import redis

from conftest import BOTH_REDIS
from devicehub.clock import SystemClock
from devicehub.lwm2m import codes
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import TEMPERATURE
from support.apps import EventReader
from support.service import ServiceProcess
from support.waiting import eventually, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

HANDED_OVER_WITHIN = 5.0  # seconds; without a hand-over the work would wait for the device's Update (an hour here)


@dataclass
class Cluster:
    redis_url: str
    node_a: ServiceProcess
    node_b: ServiceProcess


@pytest.fixture
def cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """Two nodes on `redis_url` (a single Redis, or a Redis Cluster when the test asks for both: conftest.py)."""
    url = redis_url
    node_a = ServiceProcess(data_dir=tmp_path / "a", extra_args=("--redis-url", url, "--node-id", "node-a"))
    node_a.start()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "dev-api-key").write_text(node_a.api_key + "\n")  # one application, one key
    node_b = ServiceProcess(data_dir=tmp_path / "b", extra_args=("--redis-url", url, "--node-id", "node-b"))
    try:
        node_b.start()
        yield Cluster(url, node_a, node_b)
    finally:
        node_b.stop()
        node_a.stop()


@dataclass
class Scene:
    http: aiohttp.ClientSession  # on node A
    events: EventReader  # the application's WebSocket, on node A
    sim: SimDevice  # registered on node B
    device_id: str


@asynccontextmanager
async def device_on_b_app_on_a(cluster: Cluster) -> AsyncIterator[Scene]:
    node_a, node_b = cluster.node_a, cluster.node_b
    sim = SimDevice(SystemClock(), ("127.0.0.1", node_b.coap_port), "held-by-b", flavor=OMA, lifetime=3600)
    async with aiohttp.ClientSession(
        base_url=node_a.base_url, headers={"Authorization": f"Bearer {node_a.api_key}"}
    ) as http:
        async with http.put("/v2/notification/websocket") as r:
            assert r.status == 201
        ws = await http.ws_connect("/v2/notification/websocket-connect")
        events = EventReader(ws)
        await sim.start()
        try:
            registered = await events.wait_for("registrations", lambda e: e["original-ep"] == "held-by-b")
            yield Scene(http, events, sim, registered["ep"])
            assert sim.counters.registrations == 1
        finally:
            await ws.close()
            await sim.stop(deregister=False)


def _observed(sim: SimDevice) -> bool:
    return any(observer.path == TEMPERATURE for observer in sim.observers.by_token.values())


def _value(event: dict[str, str]) -> str:
    return base64.b64decode(event["payload"]).decode()


def _handovers(node: ServiceProcess, outcome: str) -> float:
    with urllib.request.urlopen(f"{node.base_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.search(rf'^devicehub_device_handovers_total{{outcome="{outcome}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


@BOTH_REDIS
def test_a_device_request_sent_to_another_node_reaches_the_device_through_its_holder(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with device_on_b_app_on_a(cluster) as scene:
            body = {"method": "GET", "uri": "/3/0/0"}
            async with scene.http.post(f"/v2/device-requests/{scene.device_id}?async-id=via-a", json=body) as r:
                assert r.status == 202
            answer = await scene.events.wait_for("async-responses", lambda e: e["id"] == "via-a", HANDED_OVER_WITHIN)
            assert answer["status"] == 200
            manufacturer = scene.sim.model.resource("/3/0/0")
            assert manufacturer is not None and base64.b64decode(answer["payload"]) == manufacturer.text()
            attributes = {"method": "PUT", "uri": f"{TEMPERATURE}?pmax=60"}  # a Write-Attributes takes that path too
            async with scene.http.post(f"/v2/device-requests/{scene.device_id}?async-id=attrs", json=attributes) as r:
                assert r.status == 202
            answer = await scene.events.wait_for("async-responses", lambda e: e["id"] == "attrs", HANDED_OVER_WITHIN)
            assert answer["status"] == 200  # 2.04 Changed (lwm2m/codes.py)
            assert scene.sim.log.attribute_queries == [(TEMPERATURE, ["pmax=60"])]
            assert scene.sim.counters.updates == 0  # it did not wait for the device's next contact

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert _handovers(cluster.node_a, "sent") == 2
    assert _handovers(cluster.node_b, "taken") == 2


@BOTH_REDIS
def test_a_subscription_and_its_removal_sent_to_another_node_make_its_holder_observe_and_cancel(
    cluster: Cluster,
) -> None:
    async def scenario() -> None:
        async with device_on_b_app_on_a(cluster) as scene:
            async with scene.http.put(f"/v2/subscriptions/{scene.device_id}{TEMPERATURE}") as r:
                assert r.status == 202
                subscribed = (await r.json())["async-response-id"]
            answer = await scene.events.wait_for("async-responses", lambda e: e["id"] == subscribed, HANDED_OVER_WITHIN)
            assert answer["status"] == 200
            await eventually(lambda: _observed(scene.sim), within=HANDED_OVER_WITHIN)  # by node B
            scene.sim.set_value(TEMPERATURE, 42.5)
            await scene.events.wait_for(
                "notifications", lambda e: e["path"] == TEMPERATURE and _value(e) == "42.5", HANDED_OVER_WITHIN
            )
            async with scene.http.delete(f"/v2/subscriptions/{scene.device_id}{TEMPERATURE}") as r:
                assert r.status == 204
            await eventually(lambda: not _observed(scene.sim), within=HANDED_OVER_WITHIN)  # node B cancelled it
            assert scene.sim.counters.updates == 0

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_work_for_a_device_whose_holder_is_gone_waits_for_its_next_contact_and_is_counted(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with device_on_b_app_on_a(cluster) as scene:
            cluster.node_b.stop(signal.SIGKILL)
            client = redis.Redis.from_url(cluster.redis_url)
            try:  # node B's heartbeat runs out
                wait_until(lambda: not client.exists("devicehub:alive:{node:node-b}"), within=15, what="node B gone")
            finally:
                client.close()
            body = {"method": "GET", "uri": "/3/0/0"}
            async with scene.http.post(f"/v2/device-requests/{scene.device_id}?async-id=orphan", json=body) as r:
                assert r.status == 202
            await eventually(lambda: _handovers(cluster.node_a, "orphaned") == 1, within=HANDED_OVER_WITHIN)
            assert not [e for e in scene.events.events("async-responses") if e["id"] == "orphan"]
            scene.sim.server = ("127.0.0.1", cluster.node_a.coap_port)  # the balancer now sends it to node A
            assert await scene.sim.update() == codes.CHANGED
            answer = await scene.events.wait_for("async-responses", lambda e: e["id"] == "orphan", HANDED_OVER_WITHIN)
            assert answer["status"] == 200

    asyncio.run(asyncio.wait_for(scenario(), 60))
