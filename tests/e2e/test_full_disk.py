"""A full disk (issue 14.9): reads keep working, changes answer 503, devices are told to come back, one log line.

The disk fills for real, as far as the service can tell: `prlimit --fsize=0` on the running process makes every
file write fail (EFBIG; CPython ignores SIGXFSZ), so SQLite reports I/O errors exactly where a full disk would.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import socket
import subprocess
from pathlib import Path

import aiohttp
import pytest

from devicehub._core import coap_decode, coap_encode
from devicehub.clock import SystemClock
from devicehub.lwm2m import codes
from devicehub.sim.device import SimDevice
from support.apps import EventReader
from support.service import ServiceProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("prlimit") is None, reason="prlimit (util-linux) is needed to fill the disk"),
]

TEMPERATURE = "/3303/0/5700"


def set_file_size_limit(pid: int, limit: str) -> None:
    # the soft limit only: the hard one stays, so the test can lift it again without privileges
    subprocess.run(["prlimit", "--pid", str(pid), f"--fsize={limit}:"], check=True)


def register_datagram(name: str) -> bytes:
    options = [(codes.URI_PATH, b"rd"), (codes.URI_QUERY, f"ep={name}".encode()), (codes.URI_QUERY, b"lt=60")]
    return coap_encode(codes.CON, codes.POST, 0x4242, b"\x01\x02", options, b"</3/0>")


async def reported(http: aiohttp.ClientSession, device_id: str) -> str | None:
    async with http.get(f"/v3/devices/{device_id}/echo") as r:
        assert r.status == 200
        for resource in (await r.json())["resources"]:
            if resource["resource_path"] == TEMPERATURE and "reported" in resource:
                return str(base64.b64decode(resource["reported"]["value"]).decode())
    return None


def test_a_full_disk_keeps_reads_and_refuses_changes_with_503(tmp_path: Path) -> None:
    service = ServiceProcess(data_dir=tmp_path / "data").start()

    async def scenario() -> None:
        assert service.process is not None
        sim = SimDevice(SystemClock(), ("127.0.0.1", service.coap_port), "disk-1")
        await sim.start()
        headers = {"Authorization": f"Bearer {service.api_key}"}
        try:
            await asyncio.wait_for(sim.registered.wait(), 10)
            device_id = sim.device_id or ""
            async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
                async with http.put("/v2/notification/websocket") as r:
                    assert r.status == 201
                ws = await http.ws_connect("/v2/notification/websocket-connect")
                events = EventReader(ws)
                async with http.put(f"/v2/subscriptions/{device_id}{TEMPERATURE}") as r:
                    assert r.status == 202
                sim.set_value(TEMPERATURE, 21.5)
                await events.wait_for("notifications", lambda e: base64.b64decode(e["payload"]) == b"21.5")

                set_file_size_limit(service.process.pid, "0")  # the disk is full from here on

                # values still flow: to the application and, from memory, to the echo
                sim.set_value(TEMPERATURE, 22.5)
                await events.wait_for("notifications", lambda e: base64.b64decode(e["payload"]) == b"22.5")
                assert await reported(http, device_id) == "22.5"
                async with http.get("/v3/devices") as r:
                    assert r.status == 200
                # changes are refused with 503, repeatedly, never a 500
                for attempt in range(5):
                    async with http.put(f"/v2/subscriptions/{device_id}/3/0/0") as r:
                        assert (r.status, await r.text()) == (503, "STORAGE_UNAVAILABLE")
                    body = {"method": "GET", "uri": "/3/0/0"}
                    async with http.post(f"/v2/device-requests/{device_id}?async-id=full-{attempt}", json=body) as r:
                        assert r.status == 503
                # a new device is told to come back later, not given an internal error
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                    udp.settimeout(5)
                    udp.sendto(register_datagram("disk-2"), ("127.0.0.1", service.coap_port))
                    answer = coap_decode(udp.recv(2048))
                assert answer.code == codes.SERVICE_UNAVAILABLE
                assert any(number == codes.MAX_AGE for number, _ in answer.options)

                set_file_size_limit(service.process.pid, "unlimited")  # space again
                async with http.put(f"/v2/subscriptions/{device_id}/3/0/0") as r:
                    assert r.status == 202
                await ws.close()
        finally:
            await sim.stop()

    try:
        asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        service.stop()
    log = "".join(service.output)
    assert log.count("the store cannot write") == 1  # said once, not once per failure
    assert "the store writes again" in log
    assert "Traceback" not in log
    assert "exception was never retrieved" not in log
