"""A registration storm beyond the admission bound (issue 16 #2, issue 14 #5), over real UDP: the node sheds with
5.03 and a spread Max-Age instead of queueing, says so in its metrics, and every device registers in the end."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from devicehub.clock import ManualClock
from devicehub.lwm2m.retry_calendar import LEAST_S, MIN_RATE, MOST_S, OVERBOOK
from devicehub.sim.device import OMA, SimDevice
from support.node import run, running_node
from support.waiting import eventually

DEVICES = 40
BACKLOG = 4


def test_a_storm_beyond_the_backlog_is_shed_with_max_age_and_every_device_registers_in_the_end(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock, registration_backlog=BACKLOG) as node:
            sims = [
                SimDevice(clock, ("127.0.0.1", node.coap_port), f"storm-{n}", flavor=OMA, lifetime=3600)
                for n in range(DEVICES)
            ]
            try:
                # the storm: every device registers at once; each is either taken or told when to come back
                for sim in sims:
                    await sim.start()
                await eventually(lambda: settled(sims), within=20)
                metrics = node.lwm2m.metrics()
                shed = [s for s in sims if s.counters.busy]
                assert shed and metrics["lwm2m_registrations_shed"] >= len(shed)
                assert all(LEAST_S <= (s.retry_after or 0) <= MOST_S for s in shed)
                # booked over the next seconds at the node's rate and a quarter (at least the floor; the node has
                # admitted no more in a second than in all), so the retries do not come back together, and no later
                # than needed
                rate = max(MIN_RATE, math.ceil(metrics["lwm2m_registrations"] * OVERBOOK))
                returns = Counter(s.retry_after for s in shed)
                assert max(returns.values()) <= rate and len(returns) >= len(shed) // rate
                # and never more in a second than the backlog holds (or the floor), or they are shed again
                assert max(returns.values()) <= max(MIN_RATE, BACKLOG), returns
                assert max(returns) <= LEAST_S + len(shed) // MIN_RATE + 1
                # the shed devices come back after their Max-Age; the count only rises until all are in
                counts = [metrics["lwm2m_registered_devices"]]
                while not all(s.registered.is_set() for s in sims):
                    await clock.advance(5)
                    await eventually(lambda: settled(sims), within=20)
                    counts.append(node.lwm2m.metrics()["lwm2m_registered_devices"])
                    assert len(counts) < 100, counts
                assert counts == sorted(counts) and counts[-1] == DEVICES, counts
                await node.lwm2m.flush()
                assert node.lwm2m.metrics()["lwm2m_registration_backlog"] == 0
                account = sims[0].device_id and (await node.store.get_device(sims[0].device_id or ""))
                assert account is not None
                assert await node.store.count_devices(account.account_id) == DEVICES
            finally:
                for sim in sims:
                    await sim.stop(deregister=False)

    run(scenario(), timeout=60)


def settled(sims: list[SimDevice]) -> bool:
    """Every device is registered or sleeping out a Max-Age: nothing is in flight."""
    return all(s.registered.is_set() or s.waiting_retry for s in sims)
