"""Registrations and observations outlive the node (issue 12 #5): after a stop and a start on the same data, a
device's next Update is answered 2.04 and its notifications are understood by token, with no re-registration;
a device that never comes back is expired, and announced, on time (the clock is injected)."""

from __future__ import annotations

from pathlib import Path

from devicehub.clock import ManualClock
from devicehub.domain.model import Device
from devicehub.lwm2m import codes
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import TEMPERATURE
from support.node import run, running_node
from support.waiting import eventually

LIFETIME = 300


def test_devices_keep_their_registration_and_observations_across_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        sims = {
            name: SimDevice(clock, ("127.0.0.1", 0), name, flavor=OMA, lifetime=LIFETIME)
            for name in ("back-1", "back-2", "never-1")
        }
        async with running_node(tmp_path, clock=clock) as node:
            coap_port = node.coap_port
            for sim in sims.values():
                sim.server = ("127.0.0.1", coap_port)
                await sim.start(lifecycle=False)
                await sim.register()
                response = await node.lwm2m.observe(sim.device_id or "", TEMPERATURE)
                assert response.success
            await eventually(lambda: all(sim.observers.by_token for sim in sims.values()))
        # the node is stopped; the devices keep their sockets, their location and their observation tokens
        await clock.advance(60)
        async with running_node(tmp_path, clock=clock, coap_port=coap_port) as node:
            for name in ("back-1", "back-2"):
                sim = sims[name]
                assert await sim.update() == codes.CHANGED  # not 4.04: no re-registration
                assert sim.counters.registrations == 1
                sim.set_value(TEMPERATURE, 42.5 if name == "back-1" else 43.5)
            await eventually(lambda: node.lwm2m.stats.notifications >= 2)

            async def reported(device_id: str) -> bytes | None:
                for entry in await node.store.get_snapshot(device_id):
                    if entry.path == TEMPERATURE and entry.reported is not None:
                        return entry.reported.value
                return None

            assert await reported(sims["back-1"].device_id or "") == b"42.5"
            assert await reported(sims["back-2"].device_id or "") == b"43.5"
            assert node.lwm2m.stats.registrations == 0

            # never-1 registered at t0 with lt=300 and never came back: it expires at t0 + 300 + grace, not later
            never = sims["never-1"].device_id or ""
            grace = node.settings.registration_grace
            await clock.advance(LIFETIME + grace - 60 - 2)
            assert (await node.store.get_device(never) or _NONE).state == "registered"
            await clock.advance(4)
            await eventually(lambda: node.lwm2m.stats.expirations == 1)

            async def deregistered() -> bool:  # the expiry handler writes the device after counting it
                stored = await node.store.get_device(never)
                return stored is not None and stored.state == "deregistered"

            await eventually(deregistered)
            assert await node.store.get_registration(never) is None
            for name in ("back-1", "back-2"):  # those that came back were updated: still registered
                assert node.lwm2m.registration(sims[name].device_id or "") is not None
        for sim in sims.values():
            await sim.stop(deregister=False)

    run(scenario(), timeout=60)


_NONE = Device(id="", account_id="", endpoint_name="", state="none", created_at=0.0, updated_at=0.0, last_seen_at=0.0)
