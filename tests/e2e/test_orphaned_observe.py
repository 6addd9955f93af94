"""A subscription taken while a device has no live node (issue 31 #1/#4): three `devicehub serve` nodes on one real
redis-server behind a real nginx (docker/nginx.conf); a device's node is killed with SIGKILL and its heartbeat runs
out before the device talks again. An application subscribes to one of the device's resources through the front: the
node taking it cannot reach the device (behind the front, only the node nginx sends the device's next datagram to
can), so the observe waits for the device, as a device request does (service-spec §4: a command "waits in a
guaranteed delivery queue until the device can receive it"). The device's next exchange (a CON notification that
nginx, told by ICMP that the node is gone, sends to another node) re-homes it, and that node makes the observe and
answers the subscription's async-id with 200 and the value: not an error after the CoAP time-out (93 s)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from devicehub.lwm2m.coap.parameters import MAX_TRANSMIT_WAIT
from devicehub.sim.objects import TEMPERATURE
from support.front import ThreeNodes, three_nodes_behind_the_front
from support.node_kill import registered_fleet, subscribe_through
from support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

DEVICES = 6
BATTERY = "/3/0/9"  # observed by nobody until the subscriptions below; the simulator's value is 100
# a device re-homes on a retransmission of its CON once the front gives up the dead node's session: within the
# CON's whole transmission window (RFC 7252 §4.8.2 MAX_TRANSMIT_WAIT, 93 s); 30 s (its 3rd transmission) was
# usually enough, but not on a loaded CI machine
REHOMED_WITHIN = MAX_TRANSMIT_WAIT


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[ThreeNodes]:
    with three_nodes_behind_the_front(tmp_path) as nodes:
        yield nodes


def test_a_subscription_taken_after_the_devices_node_died_is_observed_and_answered_when_the_device_rehomes(
    three_nodes: ThreeNodes,
) -> None:
    front, nodes = three_nodes.front, three_nodes.nodes

    async def scenario() -> None:
        async with aiohttp.ClientSession() as http:
            async with registered_fleet(http, three_nodes, DEVICES, "orph-") as (apps, devices, client):
                ids = [str(d.device_id) for d in devices]
                await eventually(  # every device observed (the applications' presubscription): it notifies changes
                    lambda: all(21.5 in app.values.get(i, ()) for app in apps.all for i in ids),
                    within=30,
                    what="every device's first value at every application",
                )
                before = three_nodes.holders()
                victim = max(("node-a", "node-b", "node-c"), key=list(before.values()).count)
                orphans = [d for d in devices if before[str(d.device_id)] == victim]
                assert nodes["abc".index(victim[-1])].stop(signal.SIGKILL) != 0
                await eventually(  # its heartbeat runs out (5 s): no live node holds its devices now
                    lambda: not client.exists(f"devicehub:alive:{{node:{victim}}}"),
                    within=15,
                    what="the killed node's heartbeat gone",
                )
                app = apps.sockets[("abc".index(victim[-1]) + 1) % 3]  # a WebSocket on a live node
                subscribed = [
                    await subscribe_through(http, front.base_url, app, str(device.device_id), BATTERY)
                    for device in orphans
                ]
                assert not any(o.path == BATTERY for d in orphans for o in d.observers.by_token.values())
                for device in orphans:  # its next exchange: a CON notification that re-homes it
                    device.set_value(TEMPERATURE, 30.5)
                await eventually(
                    lambda: [a for a in subscribed if a not in app.answers],
                    accept=lambda left: not left,
                    within=REHOMED_WITHIN,
                    what="every subscription answered once its device re-homed",
                )
                assert [app.answers[a] for a in subscribed] == [200] * len(subscribed)
                assert [app.payloads[a] for a in subscribed] == [b"100"] * len(subscribed)
                after = three_nodes.holders()
                assert {after[str(d.device_id)] for d in orphans} <= {"node-a", "node-b", "node-c"} - {victim}
                assert all(any(o.path == BATTERY for o in d.observers.by_token.values()) for d in orphans)

    asyncio.run(asyncio.wait_for(scenario(), 90 + MAX_TRANSMIT_WAIT))
