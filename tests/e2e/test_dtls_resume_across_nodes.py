"""DTLS sessions resume across restarts and nodes (issue 31 #5), against real `devicehub serve` processes: a device
that established its session on a node gets the abbreviated handshake after that node restarts (SQLite: the ticket
keys in the data directory) and on another node of the same Redis (the keys in Redis), as the server's
`devicehub_dtls_handshakes_total{kind}` and the client both say; a PSK deleted, or replaced by another key, does
not resume; OpenSSL's s_client (`-sess_out`, `-sess_in`) resumes as a third-party client, over DTLS and over TLS
(`coaps+tcp://`, the same ring). The simulator's client
(`DtlsClient`) offers its last session by itself.

On main each of these handshakes was a full one: the session cache was one node's memory, and it sent no tickets."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import BOTH_REDIS
from devicehub._core import DtlsConnector, DtlsSession
from devicehub.clock import SystemClock
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Reply
from devicehub.lwm2m.dtls_client import DtlsClient
from devicehub.lwm2m.security import ClientCredentials
from support.ports import free_tcp_port, free_udp_port
from support.service import ServiceProcess
from support.third_party import openssl_binary
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

NAME = "resuming-device-0001"
KEY = b"sixteen-byte-key"
NEW_KEY = b"another-key-0016"


def add_psk(node: ServiceProcess, key: bytes = KEY) -> None:
    status, body = node.api("POST", "/v2/device-shared-keys", {"endpoint_name": NAME, "secret_hex": key.hex()})
    assert status == 201, body


def handshakes(node: ServiceProcess) -> dict[str, float]:
    """The node's `devicehub_dtls_handshakes_total` by kind."""
    with urllib.request.urlopen(f"{node.base_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.findall(r'^devicehub_dtls_handshakes_total\{kind="(\w+)"\} (\S+)$', text, re.M)
    return {kind: float(value) for kind, value in found}


def handshake(port: int, key: bytes = KEY, offer: bytes | None = None) -> DtlsSession:
    """One handshake of the engine's client over a real socket, offering `offer`; closed (close_notify) once over."""
    session, out = DtlsConnector().connect(psk_identity=NAME.encode(), psk_key=key, session=offer)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.connect(("127.0.0.1", port))
        deadline = time.monotonic() + 15
        while True:
            for datagram in out:
                udp.send(datagram)
            if session.established or session.failure is not None or time.monotonic() > deadline:
                break
            udp.settimeout(session.timeout() or 1.0)
            try:
                _, out = session.feed(udp.recv(65_536))
            except TimeoutError:
                out = session.handle_timeout()  # RFC 6347 §4.2.4: a lost flight again
            except ConnectionRefusedError:
                out = []
        for datagram in session.shutdown():
            udp.send(datagram)
    return session


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ServiceProcess]:
    port, tls_port = free_udp_port(), free_tcp_port()
    args = ("--coaps-port", str(port), "--coaps-tcp-port", str(tls_port))
    service = ServiceProcess(data_dir=tmp_path / "data", extra_args=args).start()
    service.coaps_port = port  # type: ignore[attr-defined]
    service.coaps_tcp_port = tls_port  # type: ignore[attr-defined]
    try:
        yield service
    finally:
        service.stop()


def restart(node: ServiceProcess) -> None:
    assert node.stop() == 0
    node.start()


def coaps_port(node: ServiceProcess) -> int:
    port: int = node.coaps_port  # type: ignore[attr-defined]
    return port


def test_a_device_resumes_after_its_node_restarts(node: ServiceProcess) -> None:
    add_psk(node)
    first = handshake(coaps_port(node))
    assert first.established and not first.session_reused()
    offer = first.resumable()
    restart(node)  # the session cache was its memory: only the ticket can resume
    again = handshake(coaps_port(node), offer=offer)
    assert again.established and again.session_reused(), again.failure
    assert handshakes(node) == {"full": 0.0, "resumed": 1.0}


def test_a_deleted_or_replaced_psk_does_not_resume(node: ServiceProcess) -> None:
    add_psk(node)
    offer = handshake(coaps_port(node)).resumable()
    restart(node)
    status, _ = node.api("DELETE", f"/v2/device-shared-keys/{NAME}")
    assert status == 204
    refused = handshake(coaps_port(node), offer=offer)
    assert not refused.established and refused.failure is not None  # a full handshake, unknown identity
    add_psk(node, NEW_KEY)
    with_old_key = handshake(coaps_port(node), offer=offer)
    assert not with_old_key.established  # the ticket's master secret no longer lets it in
    renewed = handshake(coaps_port(node), key=NEW_KEY, offer=offer)
    assert renewed.established and not renewed.session_reused()
    assert handshakes(node) == {"full": 1.0, "resumed": 0.0}


def test_the_simulators_client_offers_its_session_again_after_a_restart(node: ServiceProcess) -> None:
    async def nothing(*_: Any) -> Reply | None:
        return None

    async def scenario() -> DtlsClient:
        clock = SystemClock()
        endpoint = CoapEndpoint(clock, nothing)
        credentials = ClientCredentials(psk_identity=NAME, psk_key=KEY)
        server = ("127.0.0.1", coaps_port(node))
        client = await DtlsClient.connect("127.0.0.1", clock, endpoint, server, credentials)
        try:
            await asyncio.to_thread(restart, node)
            await client.handshake()
        finally:
            client.close()
        return client

    add_psk(node)
    client = asyncio.run(scenario())
    assert (client.handshakes, client.resumed) == (2, 1)
    assert handshakes(node)["resumed"] == 1.0


@pytest.mark.parametrize("transport", ["dtls", "tls"])
def test_openssl_s_client_resumes_across_a_restart(node: ServiceProcess, tmp_path: Path, transport: str) -> None:
    """DTLS on the coaps:// port, and TLS on the coaps+tcp:// one: the same tickets, the same ring."""
    add_psk(node)
    saved = tmp_path / "session.pem"
    if transport == "dtls":
        where = ["-dtls1_2", "-connect", f"127.0.0.1:{coaps_port(node)}"]
    else:
        where = ["-tls1_2", "-alpn", "coap", "-connect", f"127.0.0.1:{node.coaps_tcp_port}"]  # type: ignore[attr-defined]

    def s_client(*args: str) -> str:
        done = subprocess.run(
            [openssl_binary(), "s_client", *where, "-psk_identity", NAME, "-psk", KEY.hex(),
             "-cipher", "PSK-AES128-CCM8", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30,
        )  # fmt: skip
        return done.stdout.decode(errors="replace")

    first = s_client("-sess_out", str(saved))
    assert "New, TLSv1.2, Cipher is PSK-AES128-CCM8" in first and "TLS session ticket:" in first, first
    restart(node)
    again = s_client("-sess_in", str(saved))
    assert "Reused, TLSv1.2, Cipher is PSK-AES128-CCM8" in again, again
    if transport == "dtls":
        assert handshakes(node) == {"full": 0.0, "resumed": 1.0}


@pytest.mark.redis
@BOTH_REDIS
def test_a_device_resumes_on_another_node_of_the_same_redis(redis_url: str, tmp_path: Path) -> None:
    sealing = tmp_path / "secret.key"  # the nodes of one store share their sealing key (README "Several nodes")
    ports = free_udp_port(), free_udp_port()
    nodes = []
    try:
        for name, port in zip(("a", "b"), ports, strict=True):
            (tmp_path / name).mkdir()
            if nodes:
                (tmp_path / name / "dev-api-key").write_text(nodes[0].api_key + "\n")
            args = ("--redis-url", redis_url, "--node-id", name, "--coaps-port", str(port))
            nodes.append(
                ServiceProcess(data_dir=tmp_path / name, extra_args=(*args, "--secret-key-file", str(sealing))).start()
            )
        add_psk(nodes[0])
        first = handshake(ports[0])
        assert first.established and not first.session_reused(), first.failure
        # node B learns of the PSK A stored on its next credential refresh: until then it refuses the identity
        wait_until(lambda: handshake(ports[1]).established, within=30, what="node b knows the PSK")
        moved = handshake(ports[1], offer=first.resumable())
        assert moved.established and moved.session_reused(), moved.failure
        assert handshakes(nodes[1]) == {"full": 1.0, "resumed": 1.0}
    finally:
        for each in nodes:
            each.stop()
