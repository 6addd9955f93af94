"""Redis failing under a running node (issue 14 #13): restarted on the same port while notifications flow, and
frozen (SIGSTOP) then thawed. The node is never restarted: it must say it is unready, answer 503 rather than
hang, lose no event, and come back by itself."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from devicehub.clock import SystemClock
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import TEMPERATURE
from support.apps import EventReader
from support.redis_server import RedisProcess
from support.service import ServiceProcess
from support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

REDIS_TIMEOUT = "1"  # seconds a Redis command may take before the node gives up on it


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    (tmp_path / "redis").mkdir()
    server = RedisProcess(str(tmp_path / "redis")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def node(redis: RedisProcess, tmp_path: Path) -> Iterator[ServiceProcess]:
    args = ("--redis-url", redis.url, "--redis-timeout", REDIS_TIMEOUT)
    service = ServiceProcess(data_dir=tmp_path / "node", extra_args=args).start()
    try:
        yield service
    finally:
        service.stop()


def _value(event: dict[str, str]) -> float:
    return float(base64.b64decode(event["payload"]))


async def _ready(http: aiohttp.ClientSession, node: ServiceProcess) -> int:
    async with http.get(f"{node.base_url}/readyz", timeout=aiohttp.ClientTimeout(total=10)) as r:
        return r.status


async def _until_ready(http: aiohttp.ClientSession, node: ServiceProcess, status: int, within: float = 10.0) -> None:
    await eventually(
        lambda: _ready(http, node), accept=lambda answer: answer == status, within=within, what=f"/readyz {status}"
    )


async def _device_and_socket(
    http: aiohttp.ClientSession, node: ServiceProcess
) -> tuple[SimDevice, EventReader, aiohttp.ClientWebSocketResponse]:
    async with http.put(f"{node.base_url}/v2/notification/websocket") as r:
        assert r.status == 201
    rules = [{"endpoint-name": "fault-*", "resource-path": ["/3303/0/5700"]}]
    async with http.put(f"{node.base_url}/v2/subscriptions", json=rules) as r:
        assert r.status == 202
    ws = await http.ws_connect(f"{node.base_url}/v2/notification/websocket-connect")
    reader = EventReader(ws)
    sim = SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), "fault-1", flavor=OMA)
    await sim.start()
    await reader.wait_for("notifications", lambda e: _value(e) == 21.5)  # the observed initial value
    return sim, reader, ws


async def _notify(sim: SimDevice, values: list[float]) -> None:
    """The device reports each value and has it acknowledged (confirmable), one at a time."""
    for value in values:
        sent = sim.counters.notifications
        sim.set_value(TEMPERATURE, value)
        await eventually(lambda sent=sent: sim.counters.notifications > sent, within=10.0)


def test_redis_restarted_under_load_loses_no_acknowledged_event_and_the_node_recovers(
    redis: RedisProcess, node: ServiceProcess
) -> None:
    before, during, after = [30.5, 31.5, 32.5], [40.5, 41.5, 42.5], [50.5, 51.5]

    async def main() -> list[float]:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {node.api_key}"}) as http:
            sim, reader, ws = await _device_and_socket(http, node)
            try:
                await _notify(sim, before)
                await reader.wait_for("notifications", lambda e: _value(e) == before[-1])
                redis.stop()
                await _until_ready(http, node, 503)
                await _notify(sim, during)  # the node takes them while Redis is away
                redis.start()
                await _until_ready(http, node, 200)
                await _notify(sim, after)
                await reader.wait_for("notifications", lambda e: _value(e) == after[-1], timeout=20)
                async with http.get(f"{node.base_url}/v3/devices", params={"filter": "state=registered"}) as r:
                    assert r.status == 200  # REST works again through the same node
                return [_value(e) for e in reader.events("notifications")]
            finally:
                await ws.close()
                await sim.stop(deregister=False)

    received = asyncio.run(asyncio.wait_for(main(), 60))
    assert [v for v in received if v >= 30] == before + during + after  # none lost, none repeated, in order
    # issue 32 #5: the outage is said, once per task, as Redis being away: not a traceback per tick
    assert not [line for line in node.output if line.startswith("Traceback")], "".join(node.output)


def test_a_frozen_redis_makes_requests_fail_with_503_not_hang_and_the_node_recovers(
    redis: RedisProcess, node: ServiceProcess
) -> None:
    async def main() -> None:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {node.api_key}"}) as http:
            sim, reader, ws = await _device_and_socket(http, node)
            try:
                redis.freeze()
                started = time.monotonic()
                async with http.get(f"{node.base_url}/v3/devices", timeout=aiohttp.ClientTimeout(total=15)) as r:
                    assert r.status == 503
                    assert (await r.json())["type"] == "service_unavailable"
                assert time.monotonic() - started < 5
                assert await _ready(http, node) == 503
                redis.thaw()
                await _until_ready(http, node, 200)
                async with http.get(f"{node.base_url}/v3/devices") as r:
                    assert r.status == 200
                await _notify(sim, [60.5])
                await reader.wait_for("notifications", lambda e: _value(e) == 60.5, timeout=20)
            finally:
                await ws.close()
                await sim.stop(deregister=False)

    asyncio.run(asyncio.wait_for(main(), 60))
