"""`devicehub edge` as its own process against `devicehub serve`: GET /status reports the real connection, and
SIGTERM ends it promptly (its socket file removed) even when the service has gone."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from support.edge import float_objects
from support.ports import free_tcp_port
from support.service import ServiceProcess
from support.waiting import wait_until

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
        wait_until(lambda: _status(port)[0]["status"] == "connected", within=15, what="edge connected")
        assert len(str(_status(port)[0]["internal-id"])) == 32
        service.stop()
        # keepalive 1 s + at most 10.5 × 0.2 s of probes: the status turns to error
        wait_until(lambda: _status(port)[0]["status"] == "error", within=1 + 10.5 * 0.2 + 5, what="edge in error")
        assert _status(port)[0]["error_code"] == 504
    finally:
        edge.terminate()
        edge.wait(timeout=15)
        if edge.stdout is not None:
            edge.stdout.close()
        service.stop()


def _edge_process(service: ServiceProcess, port: int, socket_path: Path) -> subprocess.Popen[str]:
    edge = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devicehub",
            "edge",
            "--server",
            service.coap_uri,
            "--endpoint-name",
            "edge-term",
            "-o",
            str(port),
            "-p",
            str(socket_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert edge.stdout is not None
    for line in edge.stdout:
        if line.startswith("devicehub edge: status"):
            break
    return edge


def test_edge_process_exits_promptly_on_sigterm_with_the_service_gone_and_removes_its_socket(tmp_path: Path) -> None:
    service = ServiceProcess(data_dir=tmp_path / "data").start()
    port, socket_path = free_tcp_port(), tmp_path / "edge.sock"
    edge = _edge_process(service, port, socket_path)

    async def scenario() -> float:
        connector = aiohttp.UnixConnector(path=str(socket_path))
        async with aiohttp.ClientSession(connector=connector) as local:
            ws = await local.ws_connect("http://edge/1/pt")
            for request_id, method, params in (
                (1, "protocol_translator_register", {"name": "pt-term"}),
                (2, "device_register", {"deviceId": "child-term", "objects": float_objects(1.0)}),
            ):
                await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
                answer = json.loads((await ws.receive(timeout=15)).data)
                assert answer == {"jsonrpc": "2.0", "id": request_id, "result": "ok"}, answer
            await asyncio.to_thread(service.stop)  # the service is gone: de-registrations go unanswered
            started = time.monotonic()
            edge.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(edge.wait, 20)
            assert code == 0
            return time.monotonic() - started

    try:
        assert _status(port)[0]["endpoint-name"] == "edge-term"
        elapsed = asyncio.run(scenario())
        assert elapsed < 8, elapsed  # one bounded send per de-registration (≤ 1.5 s each), not CoAP's 93 s window
        assert not socket_path.exists()
    finally:
        if edge.poll() is None:
            edge.kill()
            edge.wait()
        if edge.stdout is not None:
            edge.stdout.close()
        service.stop()
