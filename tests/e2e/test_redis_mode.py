"""`devicehub serve --redis-url`: the service runs on a real Redis and what it stores outlives the node."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from conftest import BOTH_REDIS
from devicehub.clock import SystemClock
from devicehub.sim.device import OMA, SimDevice
from support.service import ServiceProcess

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


async def _register_and_subscribe(service: ServiceProcess) -> str:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    sim = SimDevice(SystemClock(), ("127.0.0.1", service.coap_port), "redis-1", flavor=OMA)
    await sim.start()
    try:
        await asyncio.wait_for(sim.registered.wait(), 10)
        device_id = sim.device_id or ""
        async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
            async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700") as r:
                assert r.status == 202
            async with http.put("/v2/subscriptions", json=[{"endpoint-name": "redis-*"}]) as r:
                assert r.status == 202
        return device_id
    finally:
        await sim.stop(deregister=False)


async def _read_back(service: ServiceProcess, device_id: str) -> None:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
        async with http.get("/v3/devices", params={"filter": "state=registered"}) as r:
            assert [d["id"] for d in (await r.json())["data"]] == [device_id]
        async with http.get(f"/v2/subscriptions/{device_id}") as r:
            assert "/3303/0/5700" in await r.text()
        async with http.get("/v2/subscriptions") as r:
            assert await r.json() == [{"endpoint-name": "redis-*"}]


@BOTH_REDIS
def test_state_lives_in_redis_across_a_node_restart(redis_url: str, tmp_path: Path) -> None:
    args = ("--redis-url", redis_url)
    first = ServiceProcess(data_dir=tmp_path / "a", extra_args=args).start()
    try:
        device_id = asyncio.run(_register_and_subscribe(first))
    finally:
        assert first.stop() == 0
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "dev-api-key").write_text(first.api_key + "\n")  # the application keeps its key
    second = ServiceProcess(data_dir=tmp_path / "b", extra_args=args).start()  # no other local state
    try:
        assert second.api_key == first.api_key  # found valid in Redis
        asyncio.run(_read_back(second, device_id))
    finally:
        second.stop()
