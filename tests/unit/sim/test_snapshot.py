"""A worker's progress snapshot (`Fleet.snapshot`): its devices' counters summed, read once a second."""

from __future__ import annotations

import asyncio

from devicehub.clock import SystemClock
from devicehub.config import SimulateSettings
from devicehub.sim.counters import DeviceCounters
from devicehub.sim.fleet import COUNTERS, Fleet


def test_the_snapshot_sums_every_counter_and_counts_registered_and_notifying_devices() -> None:
    async def scenario() -> None:
        fleet = Fleet(SimulateSettings(server="coap://127.0.0.1:5683", count=5, prefix="snap-"), SystemClock(), seed=1)
        assert fleet.snapshot() == {
            **dict.fromkeys(COUNTERS, 0),
            "devices": 5,
            "registered": 0,
            "notifying": 0,
            "restarts": 0,
            "vanished": 0,
            "hot_sent": 0,
            "hot_behind": 0,
            "not_started": 0,
        }
        for n, device in enumerate(fleet.devices):
            device.counters = DeviceCounters(**{name: n * (i + 1) for i, name in enumerate(COUNTERS)})
            if n % 2:
                device.registered.set()
        totals = fleet.snapshot()
        assert {name: totals[name] for name in COUNTERS} == {
            name: sum(range(5)) * (i + 1) for i, name in enumerate(COUNTERS)
        }
        assert (totals["devices"], totals["registered"], totals["notifying"]) == (5, 2, 4)

    asyncio.run(scenario())
