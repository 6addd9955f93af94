"""`devicehub edge` as its own process against `devicehub serve`: GET /status reports the real connection, and
SIGTERM ends it promptly (its socket file removed) even when the service has gone."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from support.apps import EventReader
from support.edge import float_objects
from support.ports import free_tcp_port, free_udp_port
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


def _edge_process(
    service: ServiceProcess,
    port: int,
    socket_path: Path,
    endpoint_name: str = "edge-term",
    server: str = "",
    *extra: str,
) -> subprocess.Popen[str]:
    edge = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devicehub",
            "edge",
            "--server",
            server or service.coap_uri,
            "--endpoint-name",
            endpoint_name,
            "-o",
            str(port),
            "-p",
            str(socket_path),
            *extra,
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


EDGE_NAME = "edge-gateway-00001"  # Pelion: a PSK endpoint name has 16-64 characters
EDGE_KEY = bytes(range(16)).hex()


def test_edge_process_over_coaps_with_a_psk_is_connected_and_its_child_is_read_through_the_api(
    tmp_path: Path,
) -> None:
    """issue 13 #7: `devicehub edge --server coaps://… --psk-key …` registers over DTLS with the PSK the REST API
    created; a child a translator adds registers under the gateway's identity and answers a read from the cloud."""
    coaps_port = free_udp_port()
    service = ServiceProcess(data_dir=tmp_path / "data", extra_args=("--coaps-port", str(coaps_port))).start()
    port, socket_path = free_tcp_port(), tmp_path / "edge.sock"
    edge: subprocess.Popen[str] | None = None

    async def scenario() -> None:
        headers = {"Authorization": f"Bearer {service.api_key}"}
        async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
            async with http.post(
                "/v2/device-shared-keys", json={"endpoint_name": EDGE_NAME, "secret_hex": EDGE_KEY}
            ) as r:
                assert r.status == 201, await r.text()
            nonlocal edge
            edge = _edge_process(
                service, port, socket_path, EDGE_NAME, f"coaps://127.0.0.1:{coaps_port}", "--psk-key", EDGE_KEY
            )
            await asyncio.to_thread(
                wait_until, lambda: _status(port)[0]["status"] == "connected", within=15, what="edge connected"
            )
            connector = aiohttp.UnixConnector(path=str(socket_path))
            async with aiohttp.ClientSession(connector=connector) as local:
                ws = await local.ws_connect("http://edge/1/pt")
                for request_id, method, params in (
                    (1, "protocol_translator_register", {"name": "pt-coaps"}),
                    (2, "device_register", {"deviceId": "child-coaps", "objects": float_objects(21.5)}),
                ):
                    request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
                    await ws.send_str(json.dumps(request))
                    answer = json.loads((await ws.receive(timeout=15)).data)
                    assert answer == {"jsonrpc": "2.0", "id": request_id, "result": "ok"}, answer
                async with http.get("/v3/devices") as r:
                    devices = {d["endpoint_name"]: d for d in (await r.json())["data"]}
                assert devices["child-coaps"]["state"] == "registered"
                assert devices["child-coaps"]["host_gateway"] == devices[EDGE_NAME]["id"]
                async with http.put("/v2/notification/websocket") as r:
                    assert r.status == 201
                events = EventReader(await http.ws_connect("/v2/notification/websocket-connect"))
                child_id = devices["child-coaps"]["id"]
                async with http.post(
                    f"/v2/device-requests/{child_id}?async-id=read-1", json={"method": "GET", "uri": "/3303/0/5700"}
                ) as r:
                    assert r.status == 202
                response = await events.wait_for("async-responses", lambda e: e["id"] == "read-1")
                assert response["status"] == 200
                assert base64.b64decode(response["payload"]) == b"21.5"
                await events.ws.close()
                await ws.close()

    try:
        asyncio.run(scenario())
        assert _status(port)[0]["endpoint-name"] == EDGE_NAME
    finally:
        if edge is not None:
            edge.terminate()
            edge.wait(timeout=15)
            if edge.stdout is not None:
                edge.stdout.close()
        service.stop()
