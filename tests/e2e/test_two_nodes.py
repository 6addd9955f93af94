"""Two `devicehub serve` nodes on one real Redis act as one service (issue 5): a device on node A, the app's
WebSocket on node B; B is killed, the app reconnects to A and gets every event queued meanwhile, each once."""

from __future__ import annotations

import asyncio
import base64
import signal
from pathlib import Path

import aiohttp
import pytest

from conftest import BOTH_REDIS
from devicehub.clock import SystemClock
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import TEMPERATURE
from support.apps import EventReader
from support.service import ServiceProcess
from support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

WHILE_AWAY = [31.5, 32.5, 33.5, 34.5]


def _value(event: dict[str, str]) -> float:
    return float(base64.b64decode(event["payload"]))


async def _scenario(node_a: ServiceProcess, node_b: ServiceProcess) -> list[float]:
    headers = {"Authorization": f"Bearer {node_a.api_key}"}
    sim = SimDevice(SystemClock(), ("127.0.0.1", node_a.coap_port), "two-1", flavor=OMA)
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.put(f"{node_b.base_url}/v2/notification/websocket") as r:
            assert r.status == 201
        rules = [{"endpoint-name": "two-*", "resource-path": ["/3303/0/5700"]}]
        async with http.put(f"{node_a.base_url}/v2/subscriptions", json=rules) as r:
            assert r.status == 202
        ws_b = await http.ws_connect(f"{node_b.base_url}/v2/notification/websocket-connect")
        reader_b = EventReader(ws_b)
        await sim.start()
        try:
            # registered on A, observed by A, delivered by B
            await reader_b.wait_for("registrations", lambda e: e["original-ep"] == "two-1")
            await reader_b.wait_for("notifications", lambda e: _value(e) == 21.5)  # the observed initial value
            sim.set_value(TEMPERATURE, 30.5)
            await reader_b.wait_for("notifications", lambda e: _value(e) == 30.5)

            assert node_b.stop(signal.SIGKILL) != 0  # node B dies with the socket open
            await ws_b.receive()  # the connection drops
            for sent, value in enumerate(WHILE_AWAY, start=2):
                sim.set_value(TEMPERATURE, value)
                await eventually(lambda sent=sent: sim.counters.notifications >= sent, within=10.0)  # one at a time

            ws_a = await http.ws_connect(f"{node_a.base_url}/v2/notification/websocket-connect")
            reader_a = EventReader(ws_a)
            await reader_a.wait_for("notifications", lambda e: _value(e) == WHILE_AWAY[-1], timeout=30)
            await ws_a.close()
            return [_value(e) for e in reader_a.events("notifications")]
        finally:
            await sim.stop(deregister=False)


@BOTH_REDIS
def test_events_follow_the_key_across_nodes_and_survive_a_killed_node(redis_url: str, tmp_path: Path) -> None:
    args = ("--redis-url", redis_url)
    node_a = ServiceProcess(data_dir=tmp_path / "a", extra_args=(*args, "--node-id", "node-a")).start()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "dev-api-key").write_text(node_a.api_key + "\n")  # one application, one key
    node_b = ServiceProcess(data_dir=tmp_path / "b", extra_args=(*args, "--node-id", "node-b")).start()
    try:
        received = asyncio.run(_scenario(node_a, node_b))
    finally:
        node_b.stop()
        node_a.stop()
    # every value queued while the application was away arrives after reconnecting, in order, once each
    after = [v for v in received if v in WHILE_AWAY]
    assert after == WHILE_AWAY
