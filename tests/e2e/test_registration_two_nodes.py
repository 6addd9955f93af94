"""Redis mode: a device's datagrams may reach any node (a UDP load balancer re-hashing after a node dies). The
device registers on node A; its source port moves and its traffic goes to node B, which understands its
notifications by token and accepts its Update (2.04) from the stored registration (issue 12 #5)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devicehub.clock import SystemClock
from devicehub.lwm2m import codes
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import TEMPERATURE
from support.node import run, running_node
from support.redis_server import redis_server
from support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


@pytest.fixture
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def test_a_device_whose_address_moves_to_another_node_is_served_there_without_re_registering(
    tmp_path: Path, redis_url: str
) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path / "a", redis_url=redis_url) as node_a,
            running_node(tmp_path / "b", redis_url=redis_url) as node_b,
        ):
            sim = SimDevice(SystemClock(), ("127.0.0.1", node_a.coap_port), "moving-1", flavor=OMA)
            await sim.start(lifecycle=False)
            try:
                await sim.register()
                device_id = sim.device_id or ""
                assert (await node_a.lwm2m.observe(device_id, TEMPERATURE)).success
                await node_a.lwm2m.flush()  # stored in batches: another node sees it once written (issue 16 #1)
                await eventually(lambda: bool(sim.observers.by_token))
                old_address = sim.address
                await sim.endpoint.close()  # NAT rebinding: a new source port ...
                await sim.start(lifecycle=False)
                assert sim.address != old_address
                sim.server = ("127.0.0.1", node_b.coap_port)  # ... and the balancer now picks node B
                sim.set_value(TEMPERATURE, 55.5)  # a notification first: B has never seen this device
                await eventually(lambda: node_b.lwm2m.stats.notifications == 1)
                assert sim.counters.errors == 0
                assert await sim.update() == codes.CHANGED
                assert sim.counters.registrations == 1
                registration = node_b.lwm2m.registration(device_id)
                assert registration is not None and registration.address == sim.address
                snapshot = {e.path: e for e in await node_b.store.get_snapshot(device_id)}
                assert snapshot[TEMPERATURE].reported is not None
                assert snapshot[TEMPERATURE].reported.value == b"55.5"
            finally:
                await sim.stop(deregister=False)

    run(scenario(), timeout=60)
