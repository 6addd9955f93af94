"""What a REST write answered is stored before the answer (issue 15): a `devicehub serve` killed with SIGKILL right
after its 202s still has, in its data directory, the subscription (also one answered again from memory, with no
write of its own) and the device request (handed to the device's worker in memory, never read back)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
import pytest

from devicehub.clock import SystemClock
from devicehub.sim.device import OMA, SimDevice
from devicehub.store.sqlite.store import SqliteStore
from support.service import ServiceProcess

pytestmark = pytest.mark.e2e

TEMPERATURE = "/3303/0/5700"


async def _answered(service: ServiceProcess) -> str:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    sim = SimDevice(SystemClock(), ("127.0.0.1", service.coap_port), "kill-1", flavor=OMA)
    await sim.start()
    try:
        await asyncio.wait_for(sim.registered.wait(), 10)
        device_id = sim.device_id or ""
        async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
            for _ in range(2):  # the second is answered without a store write: the first one's row stands
                async with http.put(f"/v2/subscriptions/{device_id}{TEMPERATURE}") as r:
                    assert r.status == 202, await r.text()
        # the device goes silent (no de-registration): the request below cannot be delivered before the kill
        await sim.stop(deregister=False)
        async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
            async with http.post(
                f"/v2/device-requests/{device_id}?async-id=kill-r1&retry=2", json={"method": "GET", "uri": "/3/0/0"}
            ) as r:
                assert r.status == 202, await r.text()
        return device_id
    finally:
        await sim.stop(deregister=False)


def test_subscriptions_and_device_requests_answered_202_survive_sigkill(tmp_path: Path) -> None:
    service = ServiceProcess(data_dir=tmp_path / "data").start()
    try:
        device_id = asyncio.run(asyncio.wait_for(_answered(service), 30))
    finally:
        assert service.stop(signal.SIGKILL) == -signal.SIGKILL

    async def stored() -> None:
        store = SqliteStore(tmp_path / "data")
        await store.open()
        try:
            assert [path for _, path in await store.subscribers(device_id)] == [TEMPERATURE]
            assert [r.async_id for r in await store.pending_requests(device_id)] == ["kill-r1"]
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(stored(), 30))
