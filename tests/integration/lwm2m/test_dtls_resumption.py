"""DTLS session resumption (issue 13 #1) is not offered: python-mbedtls 2.10 configures no session cache and no
session tickets on its ServerContext (bench/README.md "DTLS session resumption" has the source lines). These tests
pin down what a client that tries it gets: OpenSSL's s_client offering its previous session is given a full
handshake under the same identity rules, none once its PSK is revoked; the project's own client handshakes afresh
when the service lost its session (a restart)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from devicehub.clock import SystemClock
from devicehub.lwm2m.errors import DeviceTimeout
from devicehub.lwm2m.security import ClientCredentials
from devicehub.node import Node
from devicehub.sim.device import OMA, SimDevice
from support.node import run, running_node
from support.ports import free_udp_port
from support.third_party import openssl_binary

NAME = "resuming-device-0001"  # Pelion: a PSK endpoint name has 16-64 characters
KEY = bytes(range(16))


async def s_client(node: Node, *args: str) -> str:
    """One `openssl s_client -dtls1_2` handshake with the PSK; stdin is empty, so it closes once connected."""
    process = await asyncio.create_subprocess_exec(
        openssl_binary(), "s_client", "-dtls1_2", "-connect", f"127.0.0.1:{node.coaps_port}",
        "-psk_identity", NAME, "-psk", KEY.hex(), "-cipher", "PSK-AES128-CCM8", *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 20)
    return out.decode(errors="replace")


def session_id(output: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in output.splitlines() if "Session-ID:" in line)


def test_openssl_offering_its_previous_session_gets_a_full_handshake_and_none_once_its_psk_is_revoked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        saved = tmp_path / "session.pem"
        async with running_node(tmp_path / "svc", dev=False, allow_nosec=False, coaps_port=free_udp_port()) as node:
            tenant = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(tenant, NAME, KEY.hex())
            first = await s_client(node, "-sess_out", str(saved))
            assert "New, TLSv1.2, Cipher is PSK-AES128-CCM8" in first, first
            assert saved.exists()
            second = await s_client(node, "-sess_in", str(saved))
            # offered, not taken: a new session (a new id), with the PSK key exchange done again
            assert "New, TLSv1.2, Cipher is PSK-AES128-CCM8" in second and "Reused" not in second, second
            assert session_id(second) != session_id(first)
            assert node.lwm2m.dtls is not None and node.lwm2m.dtls.stats.handshakes == 2
            await node.credentials.delete_psk(tenant, NAME)
            third = await s_client(node, "-sess_in", str(saved))
            assert "Reused" not in third and "alert unknown psk identity" in third, third
            assert node.lwm2m.dtls.stats.handshakes == 2
            refused = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert any(f"unknown PSK identity {NAME!r}" in message for message in refused), refused

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
                assert sim._dtls is not None and sim._dtls.handshakes == 1
            # the stopped service ended the session (close_notify): the next Register comes with a new handshake
            async with running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=port) as node:
                assert not sim._dtls.established
                await sim.register()
                assert sim._dtls.handshakes == 2 and sim.registered.is_set()
                # the service forgets the session without a word (what a crash and restart look like to the device)
                dtls = node.lwm2m.dtls
                assert dtls is not None
                dtls._forget(sim.address)
                with pytest.raises(DeviceTimeout):
                    await sim.register()  # a record of a session the service no longer has: dropped
                assert not sim._dtls.established
                await sim.register()
                assert sim._dtls.handshakes == 3 and dtls.stats.handshakes == 2
        finally:
            await sim.stop(deregister=False)

    run(main())
