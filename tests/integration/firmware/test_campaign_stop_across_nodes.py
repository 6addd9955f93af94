"""A campaign stopped in Redis mode calls off the downloads of every node's devices (issue 33): the node holding the
`firmware:campaigns` lease writes the empty Package URI (5.xml State: it resets the state machine) to a device
registered there, and hands it (issue 31 #1's hand-over, work kind firmware-cancel) to the node holding a device
registered elsewhere, which writes it over the device's own session. Before, that device went on downloading."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from test_campaign_rollout import prepare, read_until

from devicehub.clock import SystemClock
from devicehub.node import Node
from devicehub.sim.device import SimDevice
from devicehub.sim.firmware import DOWNLOADING, IDLE, FirmwareFaults, SimFirmware
from support.node import run, running_node
from support.waiting import eventually

pytestmark = pytest.mark.redis

SLOW = FirmwareFaults(block_delay_s=1.0)  # 8 blocks of 1 KiB: a download of about 8 s, which the stop catches


async def slow_device(node: Node, name: str) -> SimDevice:
    sim = SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), name, endpoint_type="fw-test", flavor="oma")
    sim.firmware = SimFirmware(sim, SLOW)
    await sim.start()
    await asyncio.wait_for(sim.registered.wait(), 10)
    await node.lwm2m.flush()
    return sim


def test_a_stop_calls_off_the_download_of_a_device_at_either_node(tmp_path: Path, redis_url: str) -> None:
    async def scenario() -> None:
        settings = {"redis_url": redis_url, "firmware_check_interval": 0.05}
        async with (
            running_node(tmp_path / "a", node_id="node-a", **settings) as a,
            running_node(tmp_path / "b", node_id="node-b", **settings) as b,
        ):
            devices = {"a": await slow_device(a, "fw-at-a"), "b": await slow_device(b, "fw-at-b")}
            try:
                headers = {"Authorization": f"Bearer {a.dev_api_key}"}
                async with aiohttp.ClientSession(f"http://127.0.0.1:{a.http_port}", headers=headers) as http:
                    campaign_id = await prepare(http)
                    path = f"/v3/update-campaigns/{campaign_id}"
                    firmwares = [d.firmware for d in devices.values()]
                    assert all(f is not None for f in firmwares)
                    await eventually(
                        lambda: all(f is not None and f.state == DOWNLOADING and f.log.blocks > 0 for f in firmwares),
                        within=20.0,
                        what="both devices downloading",
                    )
                    async with http.post(f"{path}/stop") as r:
                        assert r.status == 202
                    await read_until(http, path, lambda c: c["phase"] == "stopped")
                    # each device was written the empty Package URI, by the node it is registered at, and is Idle
                    for name, sim in devices.items():
                        await eventually(
                            lambda sim=sim: ("/5/0/1", "") in sim.log.writes,
                            within=10.0,
                            what=f"the empty Package URI at the device at node {name}",
                        )
                        assert sim.firmware is not None and sim.firmware.state == IDLE
                    async with http.get(f"{path}/campaign-device-metadata") as r:
                        states = {d["name"]: d for d in (await r.json())["data"]}
                assert {s["step"] for s in states.values()} == {"skipped"}
            finally:
                await asyncio.gather(*(d.stop() for d in devices.values()))

    run(scenario())
