"""`devicehub simulate --bootstrap coap://…` against `devicehub serve --bootstrap-port …`, both real processes: each
device bootstraps, then registers with the service and is listed by the API; the simulator reports it."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
import pytest

from support.apps import simulator
from support.ports import free_udp_port
from support.service import ServiceProcess

pytestmark = pytest.mark.e2e


def test_simulate_with_bootstrap_ends_with_devices_registered_and_reports_it(tmp_path: Path) -> None:
    bootstrap_port = free_udp_port()
    service = ServiceProcess(data_dir=tmp_path / "data", extra_args=("--bootstrap-port", str(bootstrap_port))).start()
    try:
        assert f"bootstrap coap://127.0.0.1:{bootstrap_port}" in "".join(service.output)
        bootstrap_uri = f"coap://127.0.0.1:{bootstrap_port}"
        fleet = simulator(
            service.coap_uri, "--bootstrap", bootstrap_uri, "--count", "2", "--prefix", "bsp-", "--rate", "0"
        )

        async def listed() -> list[str]:
            headers = {"Authorization": f"Bearer {service.api_key}"}
            async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
                loop = asyncio.get_running_loop()
                end = loop.time() + 15
                while loop.time() < end:
                    async with http.get("/v3/devices") as r:
                        names = sorted(d["endpoint_name"] for d in (await r.json())["data"])
                    if len(names) == 2:
                        return names
                    await asyncio.sleep(0.05)
                return names

        try:
            assert asyncio.run(listed()) == ["bsp-0", "bsp-1"]
        finally:
            fleet.send_signal(signal.SIGTERM)
            _, err = fleet.communicate(timeout=15)
        last = err.strip().splitlines()[-1]
        # the devices de-register on the way out; the bootstrap counts stay
        assert last.startswith("stopped:") and "errors 0  bootstrapped 2  bootstrap failures 0" in last
    finally:
        service.stop()
