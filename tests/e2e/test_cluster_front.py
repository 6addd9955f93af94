"""Three nodes behind one address (issue 31 #3): `devicehub serve` ×3 on one real redis-server behind a real nginx
running the repository's front (docker/nginx.conf, rendered for loopback ports). Simulated devices at distinct
loopback source addresses register through the front's one CoAP address and are spread over the nodes by their
address; REST calls through the front's one HTTP address (round robin: most reach a node that does not hold the
device) reach every device, and the application's WebSocket through the front gets the events."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from devicehub.clock import SystemClock
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import TEMPERATURE
from support.apps import EventReader
from support.front import Front, ThreeNodes, three_nodes_behind_the_front

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

DEVICES = 24  # at 24 addresses, each of three nodes holds some (a node holding none: (2/3)^24 × 3 ≈ 0.02 %)
ANSWER_WITHIN = 10.0


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[ThreeNodes]:
    with three_nodes_behind_the_front(tmp_path) as nodes:
        yield nodes


def fleet(front: Front, count: int, prefix: str) -> list[SimDevice]:
    """`count` OMA devices at 127.0.0.10, .11, …: the front hashes each address to a node."""
    return [
        SimDevice(
            SystemClock(), front.coap_address, f"{prefix}{n}", flavor=OMA, lifetime=3600, host=f"127.0.0.{10 + n}"
        )
        for n in range(count)
    ]


def _value(event: dict[str, str]) -> str:
    return base64.b64decode(event["payload"]).decode()


def test_devices_behind_the_front_spread_over_the_nodes_and_every_one_is_reached_through_the_front(
    three_nodes: ThreeNodes,
) -> None:
    front = three_nodes.front
    key = three_nodes.nodes[0].api_key

    async def scenario() -> None:
        devices = fleet(front, DEVICES, "front-")
        async with aiohttp.ClientSession(base_url=front.base_url, headers={"Authorization": f"Bearer {key}"}) as http:
            async with http.put("/v2/notification/websocket") as r:
                assert r.status == 201
            ws = await http.ws_connect("/v2/notification/websocket-connect")  # through nginx (Upgrade)
            events = EventReader(ws)
            await asyncio.gather(*(device.start() for device in devices))
            try:
                names = {device.endpoint_name for device in devices}
                tcp_device = SimDevice(SystemClock(), front.coap_tcp_address, "front-tcp", flavor=OMA, tcp=True)
                await tcp_device.start()  # CoAP over TCP (RFC 8323) through the front's stream proxy
                devices.append(tcp_device)
                names.add(tcp_device.endpoint_name)
                for device in devices:
                    await asyncio.wait_for(device.registered.wait(), ANSWER_WITHIN)
                seen: set[str] = set()
                await events.wait_for(
                    "registrations", lambda e: seen.add(e["original-ep"]) or seen >= names, ANSWER_WITHIN
                )
                holders = three_nodes.holders()
                assert set(holders) == {device.device_id for device in devices}
                assert set(holders.values()) == {"node-a", "node-b", "node-c"}  # spread by source address

                # every device answers a request sent to the front: round robin takes most to a non-holder
                body = {"method": "GET", "uri": "/3/0/0"}
                for n, device in enumerate(devices):
                    async with http.post(f"/v2/device-requests/{device.device_id}?async-id=r{n}", json=body) as r:
                        assert r.status == 202
                for n in range(len(devices)):
                    answer = await events.wait_for("async-responses", lambda e, n=n: e["id"] == f"r{n}", ANSWER_WITHIN)
                    assert answer["status"] == 200
                    assert base64.b64decode(answer["payload"]).decode() == "devicehub"
                # a subscription through the front: the holder observes, the value reaches the WebSocket
                watched = devices[-1]
                async with http.put(f"/v2/subscriptions/{watched.device_id}{TEMPERATURE}") as r:
                    assert r.status == 202
                await events.wait_for(
                    "notifications", lambda e: e["ep"] == watched.device_id and e["path"] == TEMPERATURE, ANSWER_WITHIN
                )
                watched.set_value(TEMPERATURE, 42.5)
                await events.wait_for(
                    "notifications", lambda e: e["ep"] == watched.device_id and _value(e) == "42.5", ANSWER_WITHIN
                )
                assert all(device.counters.updates == 0 for device in devices)  # no work waited for an Update
            finally:
                await ws.close()
                await asyncio.gather(*(device.stop(deregister=False) for device in devices))

    asyncio.run(asyncio.wait_for(scenario(), 60))
