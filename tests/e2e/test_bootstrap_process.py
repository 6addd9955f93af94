"""`devicehub simulate --bootstrap coap://…` against `devicehub serve --bootstrap-port …`, both real processes: each
device bootstraps, then registers with the service and is listed by the API; the simulator reports it.

Issue 28 #6: without `--allow-nosec` the plain bootstrap port answers 4.03 (no keys in clear); over DTLS
(`--bootstrap-coaps-port`) the simulator bootstraps with its PSK and registers over DTLS with what it was given;
third-party clients (libcoap's coap-client over OpenSSL, aiocoap over tinydtls) are answered only for their own
identity, and aiocoap receives the Bootstrap-Writes over DTLS."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicehub._core import tlv_decode
from support.apps import simulator
from support.ports import free_udp_port
from support.service import ServiceProcess
from support.third_party import coap_client
from support.waiting import eventually, wait_until

pytestmark = pytest.mark.e2e

DEVICE = "bootstrap-device-0000"  # of account acme, configured there (a PSK name has 16-64 characters)
OTHER = "bootstrap-other-00001"  # of account other
KEY = "bootstrap-key-0001"  # coap-client -k takes the key as text
OTHER_KEY = "another-key-000002"


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

                async def names() -> list[str]:
                    async with http.get("/v3/devices") as r:
                        return sorted(d["endpoint_name"] for d in (await r.json())["data"])

                return await eventually(
                    names, accept=lambda found: len(found) == 2, within=15, what="two devices listed", every=0.05
                )

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


def devicehub(data_dir: Path, *args: str) -> str:
    """A `devicehub` administration command against the service's store (before it starts)."""
    done = subprocess.run(
        [sys.executable, "-m", "devicehub", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@dataclass
class Provisioned:
    data_dir: Path
    coaps_port: int  # the LwM2M server over DTLS that DEVICE is bootstrapped to


def provision(tmp_path: Path) -> Provisioned:
    """Accounts acme (DEVICE: enrolled, PSK, bootstrap configuration: PSK mode to this service's DTLS port, with
    the same key, as devicehub keeps one key per PSK identity) and other (OTHER: enrolled, PSK)."""
    data_dir, coaps_port = tmp_path / "data", free_udp_port()
    for account, name, key in (("acme", DEVICE, KEY), ("other", OTHER, OTHER_KEY)):
        devicehub(data_dir, "accounts", "create", account)
        devicehub(data_dir, "accounts", "enroll", account, name)
        devicehub(data_dir, "psk", "add", account, name, key.encode().hex())
    devicehub(
        data_dir,
        "bootstrap", "set", DEVICE, "--account", "acme", "--server-uri", f"coaps://127.0.0.1:{coaps_port}",
        "--security-mode", "psk", "--identity", DEVICE, "--secret-key-hex", KEY.encode().hex(), "--lifetime", "120",
    )  # fmt: skip
    return Provisioned(data_dir, coaps_port)


def secure_service(given: Provisioned, *args: str) -> ServiceProcess:
    """`serve` without --dev or --allow-nosec: devices over DTLS only."""
    return ServiceProcess(
        data_dir=given.data_dir, dev=False, extra_args=("--coaps-port", str(given.coaps_port), *args)
    ).start()


def logged(service: ServiceProcess, text: str, within: float = 15) -> str:
    return wait_until(
        lambda: next((line for line in list(service.output) if text in line), ""), within=within, what=repr(text)
    )


def test_serve_without_allow_nosec_answers_plain_bootstrap_with_4_03_and_says_so_at_start(tmp_path: Path) -> None:
    """A configured endpoint name over plain CoAP used to get 2.04 and then its PSK written in clear."""
    given = provision(tmp_path)
    port = free_udp_port()
    service = secure_service(given, "--bootstrap-port", str(port))
    try:
        started = "".join(service.output)
        _, out = asyncio.run(coap_client("-m", "post", f"coap://127.0.0.1:{port}/bs?ep={DEVICE}"))
        assert "4.03 DTLS required" in out, out
        assert f"bootstrap over plain CoAP (--bootstrap-port {port}) refused" in started
        logged(service, "plain CoAP bootstrap from 127.0.0.1 refused")
        assert "bootstrapped" not in "".join(service.output)
    finally:
        service.stop()


def test_simulator_bootstraps_over_dtls_with_a_psk_then_registers_over_dtls_with_what_it_was_given(
    tmp_path: Path,
) -> None:
    given = provision(tmp_path)
    port = free_udp_port()
    service = secure_service(given, "--bootstrap-coaps-port", str(port))
    try:
        assert f"bootstrap coaps://127.0.0.1:{port}" in "".join(service.output)
        fleet = subprocess.Popen(
            [
                sys.executable, "-m", "devicehub", "simulate", "--bootstrap", f"coaps://127.0.0.1:{port}",
                "--psk-key", KEY.encode().hex(), "--prefix", DEVICE[:-1], "--count", "1", "--rate", "0",
                "--flavor", "oma", "--duration", "30",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            logged(service, f"bootstrapped {DEVICE!r} to coaps://127.0.0.1:{given.coaps_port}")
            # plain CoAP is refused by this service: a registration is one over DTLS, with the written PSK
            logged(service, f"registered {DEVICE} ")
        finally:
            fleet.send_signal(signal.SIGTERM)
            out, err = fleet.communicate(timeout=30)
        report = json.loads(next(line for line in out.splitlines() if line.startswith("report: "))[8:])
        assert report["registrations"] == 1 and report["failures"]["bootstrap"] == 0, err
        assert "errors 0  bootstrapped 1  bootstrap failures 0" in err.strip().splitlines()[-1]
    finally:
        service.stop()


def test_third_party_dtls_clients_are_bootstrapped_only_as_their_own_identity(tmp_path: Path) -> None:
    """coap-client (OpenSSL) as account other's device asks for acme's DEVICE: 4.03, nothing written. As DEVICE it
    gets 2.04, but it ends its DTLS session as soon as an answer arrives (it has no handler for the server's
    requests), so the session ends there. aiocoap (tinydtls) serves the bootstrap interface on its client context:
    as DEVICE it receives the Bootstrap-Writes, over DTLS."""
    aiocoap = pytest.importorskip("aiocoap")
    pytest.importorskip("DTLSSocket")
    given = provision(tmp_path)
    port = free_udp_port()
    service = secure_service(given, "--bootstrap-coaps-port", str(port))
    uri = f"coaps://127.0.0.1:{port}/bs?ep={DEVICE}"
    try:
        _, out = asyncio.run(coap_client("-m", "post", uri, "-u", OTHER, "-k", OTHER_KEY))
        assert "4.03 no bootstrap configuration for this identity" in out, out
        logged(service, f"bootstrap refused: DTLS identity {OTHER!r} (psk) from 127.0.0.1")

        code, out = asyncio.run(coap_client("-m", "post", uri, "-u", DEVICE, "-k", KEY))
        assert code == 0 and "4." not in out, out
        logged(service, f"bootstrap of {DEVICE!r} failed: the DTLS session that asked has ended")

        requests = asyncio.run(aiocoap_bootstrap(aiocoap, port))
        methods = [(method, path) for method, path, _ in requests]
        assert methods == [
            ("GET", "/"), ("DELETE", "/0"), ("DELETE", "/1"), ("PUT", "/0/1"), ("PUT", "/1/0"), ("POST", "/bs")
        ]  # fmt: skip
        written = {node.id: node.value for node in tlv_decode(requests[3][2])}
        assert written[0] == f"coaps://127.0.0.1:{given.coaps_port}".encode()
        assert (written[3], written[5]) == (DEVICE.encode(), KEY.encode())  # the PSK, only inside DTLS
        logged(service, f"bootstrapped {DEVICE!r} to coaps://")
        with urllib.request.urlopen(f"{service.base_url}/metrics", timeout=5) as response:
            scraped = {
                (family.name, sample.labels.get("event")): sample.value
                for family in text_string_to_metric_families(response.read().decode())
                for sample in family.samples
            }
        bootstrap, dtls = "devicehub_bootstrap_events", "devicehub_bootstrap_dtls_events"
        # forbidden: coap-client as OTHER; failed: coap-client as DEVICE, gone after 2.04; completed: aiocoap
        counts = {event: scraped[bootstrap, event] for event in ("forbidden", "failed", "completed")}
        assert counts == {"forbidden": 1, "failed": 1, "completed": 1}
        assert scraped[dtls, "handshakes"] == 3
    finally:
        service.stop()


def test_anjays_bootstrap_pack_request_gets_4_04_over_dtls_so_it_falls_back_to_the_bootstrap_request(
    tmp_path: Path,
) -> None:
    """AVSystem Anjay 3.14 opens a client-initiated bootstrap with the LwM2M 1.2 Bootstrap-Pack-Request
    (`GET /bspack?ep=…`, Core 1.2 §6.1.7) and falls back to `POST /bs` only on 4.04 (seen with its demo client
    against this service; the whole Anjay run is a by-hand check, README "Bootstrap"). Replayed here with libcoap
    over DTLS as the device; the fallback's `POST /bs` flow is the aiocoap test above."""
    given = provision(tmp_path)
    port = free_udp_port()
    service = secure_service(given, "--bootstrap-coaps-port", str(port))
    try:
        uri = f"coaps://127.0.0.1:{port}/bspack?ep={DEVICE}"
        _, out = asyncio.run(coap_client("-m", "get", "-A", "112", uri, "-u", DEVICE, "-k", KEY))
        assert "4.04" in out, out
        _, out = asyncio.run(
            coap_client("-m", "post", f"coaps://127.0.0.1:{port}/bs?ep={DEVICE}", "-u", DEVICE, "-k", KEY)
        )
        assert "4." not in out and "5." not in out, out  # the fallback is answered 2.04 (no error code printed)
    finally:
        service.stop()


async def aiocoap_bootstrap(aiocoap: Any, port: int) -> list[tuple[str, str, bytes]]:
    """aiocoap as DEVICE: `POST /bs`, then it answers the server as a device would until Bootstrap-Finish."""
    from aiocoap import resource

    finished = asyncio.Event()
    requests: list[tuple[str, str, bytes]] = []

    class BootstrapInterface(resource.Resource, resource.PathCapable):  # type: ignore[misc]
        async def needs_blockwise_assembly(self, request: Any) -> bool:
            return False

        async def render(self, request: Any) -> Any:
            path = "/" + "/".join(request.opt.uri_path)
            method = str(request.code).split()[0]
            requests.append((method, path, bytes(request.payload)))
            if request.code == aiocoap.GET:  # Bootstrap-Discover: its bootstrap account is /0/0
                return aiocoap.Message(code=aiocoap.CONTENT, content_format=40, payload=b"</>;lwm2m=1.1,</0/0>,</1>")
            if request.code == aiocoap.DELETE:
                return aiocoap.Message(code=aiocoap.DELETED)
            if request.code == aiocoap.POST and path == "/bs":
                finished.set()
            return aiocoap.Message(code=aiocoap.CHANGED)

    client = await aiocoap.Context.create_client_context(transports=["tinydtls"])
    client.serversite = BootstrapInterface()
    base = f"coaps://127.0.0.1:{port}"
    try:
        client.client_credentials.load_from_dict(
            {f"{base}/*": {"dtls": {"psk": {"ascii": KEY}, "client-identity": {"ascii": DEVICE}}}}
        )
        request = aiocoap.Message(code=aiocoap.POST, uri=f"{base}/bs?ep={DEVICE}")
        response = await asyncio.wait_for(client.request(request).response, 10)
        assert response.code == aiocoap.CHANGED, response
        await asyncio.wait_for(finished.wait(), 15)
    finally:
        await client.shutdown()
    return requests
