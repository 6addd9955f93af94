"""`devicehub edge` as its own process against `devicehub serve`: GET /status reports the real connection."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from support.ports import free_tcp_port
from support.service import ServiceProcess

pytestmark = pytest.mark.e2e


def _status(port: int) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as response:
        body: list[dict[str, object]] = json.load(response)
        return body


def test_edge_process_reports_connected_then_error_when_the_service_stops(tmp_path: Path) -> None:
    service = ServiceProcess(data_dir=tmp_path / "data").start()
    port = free_tcp_port()
    edge = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devicehub",
            "edge",
            "--server",
            service.coap_uri,
            "--endpoint-name",
            "edge-proc",
            "-o",
            str(port),
            "-p",
            str(tmp_path / "edge.sock"),
            "--keepalive-time",
            "1",
            "--keepalive-interval",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert edge.stdout is not None
        for line in edge.stdout:  # log lines, then the line saying the status API is up
            if line.startswith("devicehub edge: status"):
                break
        deadline = time.monotonic() + 15
        while _status(port)[0]["status"] != "connected":  # polling the API under test, bounded
            assert time.monotonic() < deadline, _status(port)
            time.sleep(0.05)
        assert len(str(_status(port)[0]["internal-id"])) == 32
        service.stop()
        # keepalive 1 s + at most 10.5 × 0.2 s of probes: the status turns to error
        deadline = time.monotonic() + 1 + 10.5 * 0.2 + 5
        while _status(port)[0]["status"] != "error":
            assert time.monotonic() < deadline, _status(port)
            time.sleep(0.05)
        assert _status(port)[0]["error_code"] == 504
    finally:
        edge.terminate()
        edge.wait(timeout=15)
        if edge.stdout is not None:
            edge.stdout.close()
        service.stop()
