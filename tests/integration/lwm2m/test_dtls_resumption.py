"""DTLS session resumption (issue 13 #1): OpenSSL's s_client, offering the session it saved, gets the abbreviated
handshake ("Reused"), counted by the listener; the resumed peer registers under the identity of the original
session (it offers no PSK identity of its own); once the PSK is revoked its cached session is gone, the offer
gets a full handshake and that is refused. The project's own client (it offers no session) handshakes afresh when
the service lost its session (a restart)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicehub._core import coap_encode
from devicehub.clock import SystemClock
from devicehub.domain.device_results import DeviceTimeout
from devicehub.lwm2m.security import ClientCredentials
from devicehub.node import Node
from devicehub.sim.device import OMA, SimDevice
from support.device_pki import TestCa
from support.node import run, running_node
from support.ports import free_udp_port
from support.third_party import openssl_binary
from support.waiting import eventually

NAME = "resuming-device-0001"  # Pelion: a PSK endpoint name has 16-64 characters
KEY = bytes(range(16))


async def s_client(node: Node, *args: str, register: str = "") -> str:
    """One `openssl s_client -dtls1_2` handshake (PSK unless `args` say otherwise); with `register`, it sends a CoAP
    Register for that endpoint name over the session and stays until the service holds a registration."""
    process = await asyncio.create_subprocess_exec(
        openssl_binary(), "s_client", "-dtls1_2", "-connect", f"127.0.0.1:{node.coaps_port}", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdin is not None
    if register:
        query = [(15, part.encode()) for part in (f"ep={register}", "lt=60", "lwm2m=1.1")]
        process.stdin.write(coap_encode(0, 2, 0x1234, b"rg", [(11, b"rd"), *query, (12, b"\x28")], b"</3/0>"))
        await process.stdin.drain()
        await eventually(lambda: bool(node.lwm2m.registry.devices), within=10)
    process.stdin.close()  # s_client closes the session (close_notify) and exits
    out, _ = await asyncio.wait_for(process.communicate(), 20)
    return out.decode(errors="replace")


def psk(identity: str = NAME) -> tuple[str, ...]:
    return ("-psk_identity", identity, "-psk", KEY.hex(), "-cipher", "PSK-AES128-CCM8")


def session_id(output: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in output.splitlines() if "Session-ID:" in line)


def test_a_psk_client_resumes_under_its_sessions_identity_and_cannot_once_its_psk_is_revoked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        saved = tmp_path / "session.pem"
        async with running_node(tmp_path / "svc", dev=False, allow_nosec=False, coaps_port=free_udp_port()) as node:
            tenant = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(tenant, NAME, KEY.hex())
            first = await s_client(node, *psk(), "-sess_out", str(saved))
            assert "New, TLSv1.2, Cipher is PSK-AES128-CCM8" in first, first
            dtls = node.lwm2m.dtls
            assert dtls is not None and (dtls.stats.handshakes, dtls.stats.resumed) == (1, 0)
            # resumed: the identity is the session's; the PSK identity on the command line is never sent
            second = await s_client(node, *psk("an-identity-never-sent"), "-sess_in", str(saved), register=NAME)
            assert "Reused, TLSv1.2, Cipher is PSK-AES128-CCM8" in second, second
            assert session_id(second) == session_id(first)
            assert (dtls.stats.handshakes, dtls.stats.resumed) == (2, 1)
            async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{node.http_port}/metrics") as r:
                scraped = {
                    (sample.name, tuple(sample.labels.items())): sample.value
                    for family in text_string_to_metric_families(await r.text())
                    for sample in family.samples
                }
            assert scraped[("devicehub_dtls_events_total", (("event", "resumed"),))] == 1
            assert scraped[("devicehub_dtls_events_total", (("event", "handshakes"),))] == 2
            assert scraped[("devicehub_dtls_sessions", ())] >= 0
            registration = next(iter(node.lwm2m.registry.devices.values())).registration
            assert (registration.endpoint_name, registration.account_id, registration.secure) == (NAME, tenant, True)
            # revoked: the cached session goes with the PSK; offered again, it gets a full handshake, refused
            await node.credentials.delete_psk(tenant, NAME)
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                third = await s_client(node, *psk(), "-sess_in", str(saved))
            assert "Reused" not in third and "alert unknown psk identity" in third, third
            assert (dtls.stats.handshakes, dtls.stats.resumed) == (2, 1)
            refused = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert any(f"unknown PSK identity {NAME!r}" in message for message in refused), refused

    run(main())


def test_a_certificate_client_resumes_with_its_certificate_until_its_ca_is_removed(tmp_path: Path) -> None:
    async def main() -> None:
        saved = tmp_path / "session.pem"
        ca = TestCa(tmp_path / "pki")
        device = ca.issue(NAME)
        cert = ("-cert", str(device.cert_file), "-key", str(device.key_file), "-cipher", "ECDHE-ECDSA-AES128-CCM8")
        async with running_node(tmp_path / "svc", dev=False, allow_nosec=False, coaps_port=free_udp_port()) as node:
            tenant = (await node.accounts.create_account("tenant")).id
            authority = await node.credentials.add_ca(tenant, "devices", ca.pem)
            first = await s_client(node, *cert, "-sess_out", str(saved))
            assert "New, TLSv1.2, Cipher is ECDHE-ECDSA-AES128-CCM8" in first, first
            # resumed without sending a certificate: the session's certificate decides
            second = await s_client(node, "-sess_in", str(saved), "-cipher", "ECDHE-ECDSA-AES128-CCM8", register=NAME)
            assert "Reused, TLSv1.2" in second, second
            dtls = node.lwm2m.dtls
            assert dtls is not None and (dtls.stats.handshakes, dtls.stats.resumed) == (2, 1)
            registration = next(iter(node.lwm2m.registry.devices.values())).registration
            assert (registration.endpoint_name, registration.account_id, registration.secure) == (NAME, tenant, True)
            await node.credentials.remove_ca(tenant, authority.id)
            third = await s_client(node, *cert, "-sess_in", str(saved))
            assert "Reused" not in third, third
            assert (dtls.stats.handshakes, dtls.stats.resumed, dtls.stats.refused) == (2, 1, 1)

    run(main())


def test_the_simulator_handshakes_again_when_the_service_ended_or_lost_its_session(tmp_path: Path) -> None:
    async def main() -> None:
        port = free_udp_port()
        credentials = ClientCredentials(psk_identity=NAME, psk_key=KEY)
        sim = SimDevice(SystemClock(), ("127.0.0.1", port), NAME, flavor=OMA, security=credentials)
        sim.ack_timeout, sim.max_retransmit = 0.2, 0  # a lost session shows as one unanswered Register
        try:
            async with running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=port) as node:
                tenant = (await node.accounts.create_account("tenant")).id
                await node.credentials.add_psk(tenant, NAME, KEY.hex())
                await sim.start(lifecycle=False)
                await sim.register()
                assert sim.dtls is not None and sim.dtls.handshakes == 1
            # the stopped service ended the session (close_notify): the next Register comes with a new handshake
            async with running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=port) as node:
                assert not sim.dtls.established
                await sim.register()
                assert sim.dtls.handshakes == 2 and sim.registered.is_set()
                # the service forgets the session without a word (what a crash and restart look like to the device)
                dtls = node.lwm2m.dtls
                assert dtls is not None
                dtls._forget(sim.address)
                with pytest.raises(DeviceTimeout):
                    await sim.register()  # a record of a session the service no longer has: dropped
                assert not sim.dtls.established
                await sim.register()
                assert sim.dtls.handshakes == 3 and dtls.stats.handshakes == 2
        finally:
            await sim.stop(deregister=False)

    run(main())
