"""`devicehub simulate --workers 2 --bind 127.0.0.0/30` (a real process) against a node: the devices run in two
worker processes and register from the two host addresses of the network, device n from address n mod 2, as
documented (issue 16 #4); the final report says so."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest

from support.node import run, running_node
from support.waiting import eventually

pytestmark = pytest.mark.e2e

COUNT = 6


async def progress_says(process: asyncio.subprocess.Process, text: str) -> None:
    """Read the simulator's progress lines (stderr, one a second when not a terminal) until one contains `text`."""
    assert process.stderr is not None
    while True:
        line = await process.stderr.readline()
        if not line:
            raise AssertionError(f"the simulator ended before saying {text!r}")
        if text in line.decode():
            return


def test_workers_and_bind_spread_devices_over_processes_and_local_addresses(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "devicehub", "simulate",
                "--server", f"coap://127.0.0.1:{node.coap_port}",
                "--count", str(COUNT), "--workers", "2", "--bind", "127.0.0.0/30",
                "--prefix", "spread-", "--rate", "0", "--flavor", "oma",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                await eventually(lambda: node.lwm2m.metrics()["lwm2m_registered_devices"] == COUNT, within=30)
                # the node counts a device at its Register; the worker counts it at the 2.01, a moment later (and
                # reports once a second): stopped before that, its report would be short by one
                await asyncio.wait_for(progress_says(process, f"registered {COUNT}/{COUNT}"), 30)
                hosts = {}
                for device_id in list(node.lwm2m.registry.devices):
                    registration = node.lwm2m.registration(device_id)
                    assert registration is not None
                    hosts[registration.endpoint_name] = registration.address[0]
                assert hosts == {f"spread-{n}": ("127.0.0.1", "127.0.0.2")[n % 2] for n in range(COUNT)}
            finally:
                process.send_signal(signal.SIGTERM)
                out, err = await asyncio.wait_for(process.communicate(), 30)
            assert process.returncode == 0, err.decode()
            report = json.loads(out.decode().split("report: ", 1)[1].splitlines()[0])
            workers = report["workers"]
            assert [w["devices"] for w in workers] == [COUNT // 2, COUNT // 2]
            assert len({w["pid"] for w in workers}) == 2 and process.pid not in {w["pid"] for w in workers}
            assert report["registered"] == COUNT and report["failures"]["timeouts"] == 0
            assert err.decode().strip().splitlines()[-1].startswith(f"stopped: registered {COUNT}/{COUNT}")

    run(scenario(), timeout=60)
