"""Issue 30 #5: in Redis mode a directory page reads each device's directory summary, written beside its record; every
write the service makes to a device (a Register, a registration Update, `PUT /v3/devices/{id}`, a De-register,
`DELETE`) shows on the next page exactly as `GET /v3/devices/{id}` (the whole record) shows the device, on one
Redis and on a cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from conftest import BOTH_REDIS
from devicehub.clock import SystemClock
from devicehub.domain.model import ResourceLink
from devicehub.sim.device import OMA, SimDevice
from support.service import ServiceProcess
from support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


async def _page(http: aiohttp.ClientSession) -> list[dict[str, Any]]:
    async with http.get("/v3/devices", params={"limit": "1000"}) as r:
        assert r.status == 200
        return list((await r.json())["data"])


async def _shown_alike(http: aiohttp.ClientSession, device_id: str) -> dict[str, Any]:
    """The device's page entry, asserted equal to what `GET /v3/devices/{id}` shows."""
    (entry,) = [d for d in await _page(http) if d["id"] == device_id]
    async with http.get(f"/v3/devices/{device_id}") as r:
        assert r.status == 200
        assert entry == await r.json()
    return entry


async def _scenario(service: ServiceProcess) -> None:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    sim = SimDevice(SystemClock(), ("127.0.0.1", service.coap_port), "page-1", flavor=OMA)
    await sim.start()
    try:
        await asyncio.wait_for(sim.registered.wait(), 10)
        device_id = sim.device_id or ""
        # no kept-alive connection outlives the session (the loop ends right after it)
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(service.base_url, headers=headers, connector=connector) as http:
            registered = await _shown_alike(http, device_id)
            assert registered["state"] == "registered" and registered["name"] == "page-1"
            assert await sim.update([ResourceLink(path="/3/0"), ResourceLink(path="/3303/0")]) == 0x44  # 2.04
            updated = await _shown_alike(http, device_id)
            assert updated["updated_at"] >= registered["updated_at"]
            edit = {"name": "Boiler", "description": "basement", "custom_attributes": {"room": "b1"}, "ca_id": "c"}
            async with http.put(f"/v3/devices/{device_id}", json=edit) as r:
                assert r.status == 200
            edited = await _shown_alike(http, device_id)
            assert {k: edited[k] for k in edit} == edit
            await sim.deregister()

            async def deregistered() -> bool:
                return (await _shown_alike(http, device_id))["state"] == "deregistered"

            await eventually(deregistered, within=10, every=0.05, what="the page shows the De-register")
            assert (await _shown_alike(http, device_id))["name"] == "Boiler"  # the edit outlives the De-register
            async with http.delete(f"/v3/devices/{device_id}") as r:
                assert r.status == 204
            assert [d["id"] for d in await _page(http)] == []
    finally:
        await sim.stop(deregister=False)


@BOTH_REDIS
def test_each_write_to_a_device_shows_on_the_next_page_as_the_device_itself(redis_url: str, tmp_path: Path) -> None:
    service = ServiceProcess(data_dir=tmp_path, extra_args=("--redis-url", redis_url)).start()
    try:
        asyncio.run(_scenario(service))
    finally:
        service.stop()
