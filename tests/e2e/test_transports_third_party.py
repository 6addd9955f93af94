"""Every transport a device may use, against a real `devicehub serve` process (it runs on uvloop, as deployed) and
driven by third-party clients (issue 28 #2): libcoap's coap-client-openssl registers over coap:// (--dev accepts
plain CoAP), coaps:// and coaps+tcp:// with a PSK the REST API created, and coap+tcp://, gets 2.01 Created, and the
REST API lists the device; OpenSSL's s_client completes a TLS 1.2 PSK handshake and registers over it with RFC 8323
frames; `devicehub simulate` registers over coaps+tcp:// as a process of its own; a wrong key over TLS is refused.

The in-process tests ran the TLS listener on the stdlib loop only, and it failed every connection under `serve`
(an isinstance check uvloop's TCP transport does not pass): these tests cross the process boundary instead."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devicehub.lwm2m import codes
from devicehub.lwm2m.tcp import CSM, decode_frame, encode_frame, options_body
from support.node import run
from support.ports import free_tcp_port, free_udp_port
from support.service import ServiceProcess
from support.third_party import coap_client_binary, openssl_binary
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

KEY = "sixteen-byte-key-of-any-device-1"  # coap-client -k takes the key as text; the REST API takes hex
SCHEMES = ("coap", "coaps", "coap+tcp", "coaps+tcp")


@dataclass
class Listeners:
    service: ServiceProcess
    ports: dict[str, int]  # by URI scheme

    def uri(self, scheme: str, endpoint_name: str) -> str:
        return f"{scheme}://127.0.0.1:{self.ports[scheme]}/rd?ep={endpoint_name}&lt=600"

    def add_psk(self, endpoint_name: str, key: str = KEY) -> None:
        status, body = self.service.api(
            "POST", "/v2/device-shared-keys", {"endpoint_name": endpoint_name, "secret_hex": key.encode().hex()}
        )
        assert status == 201, body

    def listed(self, endpoint_name: str) -> dict[str, Any]:
        """The device the REST API lists under `endpoint_name` once it does (the store writes in batches)."""
        device: dict[str, Any] = wait_until(
            lambda: self.service.device_named(endpoint_name), within=10, what=f"{endpoint_name} listed"
        )
        return device


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listeners]:
    """One `devicehub serve --dev` with its four device listeners; each test uses endpoint names of its own."""
    ports = {"coaps": free_udp_port(), "coap+tcp": free_tcp_port(), "coaps+tcp": free_tcp_port()}
    listener_args = ("--coaps-port", str(ports["coaps"]), "--coap-tcp-port", str(ports["coap+tcp"]))
    service = ServiceProcess(
        data_dir=tmp_path_factory.mktemp("transports") / "data",
        extra_args=(*listener_args, "--coaps-tcp-port", str(ports["coaps+tcp"])),
    ).start()
    try:
        yield Listeners(service, {"coap": service.coap_port, **ports})
    finally:
        service.stop()


def coap_client(*args: str) -> tuple[int, str]:
    """coap-client-openssl to its end, logging each PDU (-v 7): its exit code and output."""
    done = subprocess.run(
        [coap_client_binary(), "-v", "7", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60
    )
    return done.returncode, done.stdout.decode(errors="replace")


def endpoint_name(scheme: str) -> str:
    return f"third-party-{scheme.replace('+', '-')}-01"  # Pelion: a PSK endpoint name has 16-64 characters


@pytest.mark.parametrize("scheme", SCHEMES)
def test_coap_client_registers_over_each_transport_and_the_rest_api_lists_the_device(
    node: Listeners, scheme: str
) -> None:
    name = endpoint_name(scheme)
    credentials: list[str] = []
    if scheme.startswith("coaps"):
        node.add_psk(name)
        credentials = ["-u", name, "-k", KEY]
    code, out = coap_client("-m", "post", "-e", "</3/0>", *credentials, node.uri(scheme, name))
    assert code == 0, out
    assert " c:2.01 " in out, out  # libcoap's dump of the response: Created
    device = node.listed(name)
    assert device["state"] == "registered", device


def test_a_wrong_key_over_tls_is_refused_and_registers_nothing(node: Listeners) -> None:
    name = "third-party-tls-wrong-key"
    node.add_psk(name)
    _, out = coap_client("-m", "post", "-e", "</3/0>", "-u", name, "-k", KEY[::-1], node.uri("coaps+tcp", name))
    assert "alert read:fatal" in out and " c:2.01 " not in out, out  # coap-client's exit code is 0 all the same
    refusal = f"refused: PSK identity {name!r}: the handshake did not verify (wrong key?)"
    wait_until(lambda: any(refusal in line for line in node.service.output), within=10, what="the refusal logged")
    assert node.service.device_named(name) is None


def register_frames(name: str) -> bytes:
    """RFC 8323 §5.3: our CSM first, then the Register (§3.2 framing)."""
    options = [(codes.URI_PATH, b"rd"), (codes.URI_QUERY, f"ep={name}".encode()), (codes.URI_QUERY, b"lt=600")]
    return encode_frame(CSM, b"", b"") + encode_frame(codes.POST, b"\x07", options_body(options, b"</3/0>"))


async def read_until(process: asyncio.subprocess.Process, code: int) -> None:
    """The server's frames on s_client's output (with -quiet, only the application data) until one has `code`."""
    assert process.stdout is not None
    buffer = bytearray()
    while True:
        decoded = decode_frame(buffer)
        if decoded is not None:
            frame, used = decoded
            del buffer[:used]
            if frame.code == code:
                return
            continue
        chunk = await process.stdout.read(4096)
        if not chunk:
            raise AssertionError(f"s_client ended before a frame with code {code:#x}; it had {bytes(buffer)!r}")
        buffer += chunk


def test_openssl_s_client_completes_a_tls_psk_handshake_and_registers_over_it(node: Listeners) -> None:
    name = "third-party-s-client-01"
    node.add_psk(name)

    async def scenario() -> None:
        process = await asyncio.create_subprocess_exec(
            openssl_binary(), "s_client", "-tls1_2", "-quiet", "-alpn", "coap",
            "-connect", f"127.0.0.1:{node.ports['coaps+tcp']}",
            "-psk_identity", name, "-psk", KEY.encode().hex(), "-cipher", "PSK-AES128-CCM8",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdin is not None
        try:
            process.stdin.write(register_frames(name))
            await process.stdin.drain()
            await asyncio.wait_for(read_until(process, codes.CREATED), 20)
            # listed while its connection is still open (s_client is ended after)
            device = await asyncio.to_thread(node.listed, name)
            assert device["state"] == "registered", device
        finally:
            if process.returncode is None:
                process.kill()
            await process.communicate()

    run(scenario())


def test_the_simulator_process_registers_over_tls_with_a_psk(node: Listeners, tmp_path: Path) -> None:
    """`devicehub simulate --server coaps+tcp://…`: the client side of TLS, on uvloop in a process of its own."""
    prefix = "third-party-sim-tls-"
    name = f"{prefix}0"  # the simulator names its devices <prefix><n> from 0
    node.add_psk(name)
    log = tmp_path / "simulate.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "devicehub", "simulate",
                "--server", f"coaps+tcp://127.0.0.1:{node.ports['coaps+tcp']}",
                "--count", "1", "--prefix", prefix, "--flavor", "oma", "--rate", "0", "--psk-key", KEY.encode().hex(),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        try:
            device = node.listed(name)
        except AssertionError as error:
            raise AssertionError(f"{error}; the simulator said:\n{log.read_text(errors='replace')}") from None
        assert device["state"] == "registered", device
    finally:
        process.terminate()
        process.wait(timeout=20)
