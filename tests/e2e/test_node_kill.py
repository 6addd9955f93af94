"""A node killed behind the front (issue 31 #4): three `devicehub serve` nodes on one real redis-server behind a real
nginx (docker/nginx.conf); simulated devices at distinct addresses send CON notifications; every node has one
application's WebSocket and (by lease) callback channels. One node is killed with SIGKILL while its heartbeat still
says it lives, work for its devices is taken by the others: device requests, and subscriptions that the taking node
hands to the dying holder's work stream. Its devices re-home on their next exchange (a CON retransmission that nginx,
told by ICMP that the node is gone, sends to the next node on its ring), and that node takes them with the work the
dead node never did: every device's next notification reaches every application, and every request and
subscription is answered, none lost."""

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
from support.node_kill import registered_fleet, request_all, subscribe_through
from support.waiting import eventually

# the scenario's own bound fires first, naming what is missing (pyproject's per-test timeout is 120 s)
pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.timeout(120 + MAX_TRANSMIT_WAIT)]

DEVICES = 12
BATTERY = "/3/0/9"  # observed by nobody until the subscriptions below
# a device re-homes on a retransmission of its CON once the front gives up the dead node's session: within the CON's
# whole transmission window (RFC 7252 §4.8.2 MAX_TRANSMIT_WAIT, 93 s), as test_orphaned_observe.py waits. 30 s (its
# 3rd transmission, 6-9 s after the 1st) was usually enough, but one clean-clone CI run saw all four of the killed
# node's devices miss it (the eighteenth session; 9 runs of this file before and after, loaded or not, passed)
REHOMED_WITHIN = MAX_TRANSMIT_WAIT


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[ThreeNodes]:
    with three_nodes_behind_the_front(tmp_path) as nodes:
        yield nodes


def test_after_a_node_is_killed_its_devices_rehome_and_no_notification_answer_or_subscription_is_lost(
    three_nodes: ThreeNodes,
) -> None:
    front, nodes = three_nodes.front, three_nodes.nodes

    async def scenario() -> None:
        async with aiohttp.ClientSession() as http:
            async with registered_fleet(http, three_nodes, DEVICES, "kill-") as (apps, devices, client):
                ids = [str(d.device_id) for d in devices]

                def reached(value: float) -> bool:
                    return all(value in app.values.get(i, ()) for app in apps.all for i in ids)

                def missing(value: float) -> list[tuple[int, str, str]]:
                    return [
                        (n, d.endpoint_name, before.get(str(d.device_id), "?"))
                        for n, app in enumerate(apps.all)
                        for d in devices
                        if value not in app.values.get(str(d.device_id), ())
                    ]

                before: dict[str, str] = {}
                await eventually(
                    lambda: reached(21.5), within=30, what="every device's first value at every application"
                )
                before.update(three_nodes.holders())
                victim = max(("node-a", "node-b", "node-c"), key=list(before.values()).count)
                orphans = [d for d in devices if before[str(d.device_id)] == victim]
                assert nodes["abc".index(victim[-1])].stop(signal.SIGKILL) != 0
                # at once, while its heartbeat still runs (5 s): a live node takes each subscription and hands it to
                # the dying holder's work stream (issue 31 #1), where nothing will read it
                subscribed = [
                    (app, await subscribe_through(http, front.base_url, app, str(d.device_id), BATTERY))
                    for app, d in zip(apps.all * DEVICES, orphans, strict=False)
                ]
                assert client.exists(f"devicehub:alive:{{node:{victim}}}"), "the kill's window closed before the test"
                asked = await request_all(http, front.base_url, apps.all, devices, "after-kill")
                for device in devices:
                    device.set_value(TEMPERATURE, 30.5)  # the next notification of every device
                await eventually(  # the last answer seen is what is still missing
                    lambda: missing(30.5),
                    accept=lambda left: not left,
                    within=REHOMED_WITHIN,
                    what="every device's next value at every application",
                )
                await eventually(
                    lambda: [a for app, a in [*asked, *subscribed] if a not in app.answers],
                    accept=lambda left: not left,
                    within=15,
                    what="every request and subscription answered",
                )
                assert all(app.answers[a] == 200 for app, a in [*asked, *subscribed])
                after = three_nodes.holders()
                assert victim not in after.values()  # its devices re-homed: the nodes that took them hold them
                assert {after[str(d.device_id)] for d in orphans} <= {"node-a", "node-b", "node-c"} - {victim}
                assert all(d.counters.updates == 0 and d.counters.registrations == 1 for d in devices)
                assert all(d.counters.timeouts == 0 and d.observers.by_token for d in devices)  # none was reset
                for d in devices:  # and the fleet goes on
                    d.set_value(TEMPERATURE, 31.5)
                await eventually(
                    lambda: reached(31.5), within=15, what="every device's later value at every application"
                )
                assert any(app.reconnects for app in apps.sockets)  # the victim's WebSocket moved

    asyncio.run(asyncio.wait_for(scenario(), 90 + MAX_TRANSMIT_WAIT))
