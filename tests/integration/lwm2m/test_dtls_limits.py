"""No source address and no identity can take the DTLS listener from the others (issue 28 #3, #4): half-open
handshakes from one address leave others their handshakes; an identity's sessions and the table are bounded, the
oldest of an identity and the least recently active of the table making room, so a new device always gets in."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicehub.clock import ManualClock, SystemClock
from devicehub.domain.device_results import DeviceTimeout
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.dtls import DtlsListener, server_certificate
from devicehub.lwm2m.dtls_client import DtlsClient
from devicehub.lwm2m.security import ClientCredentials, Keyring
from support.dtls_flood import client_hello, collect_cookies
from support.node import run, running_node
from support.ports import free_udp_port
from support.third_party import coap_client
from support.waiting import eventually

KEY = bytes(range(16))
TESTS = Path(__file__).resolve().parents[2]  # `python -m support.dtls_flood` runs from here
FLOODER = "127.0.0.1"
ELSEWHERE = "127.0.1.1"  # another /24 of the loopback network (Linux routes all of 127/8 to lo)


def name(n: int) -> str:
    return f"limits-device-{n:05d}"


async def nothing(*_: Any) -> Reply | None:
    return None


@asynccontextmanager
async def listener(
    tmp_path: Path, devices: int = 4, clock: ManualClock | None = None, **options: Any
) -> AsyncIterator[DtlsListener]:
    clock = clock or ManualClock()  # no sweep runs: nothing times out unless a test moves the clock
    certificate = server_certificate(tmp_path / "c.pem", tmp_path / "c.key", create=True)
    bound = await DtlsListener.bind(
        "127.0.0.1", 0, clock, CoapEndpoint(clock, nothing), certificate=certificate, **options
    )
    bound.load(Keyring(psks={name(n): (KEY, "a" * 32) for n in range(devices)}))
    try:
        yield bound
    finally:
        await bound.close()


async def device(server: Address, n: int, host: str = "127.0.0.1") -> DtlsClient:
    """A device of identity `name(n)` with its session established (one attempt: a refusal is not retried)."""
    clock = SystemClock()
    credentials = ClientCredentials(psk_identity=name(n), psk_key=KEY)
    return await DtlsClient.connect(host, clock, CoapEndpoint(clock, nothing), server, credentials, attempts=1)


async def half_open(server: Address, ports: int, source: str = FLOODER) -> list[socket.socket]:
    """`ports` handshakes from `source` left half-open: each port's cookie echoed in a ClientHello, then silence."""
    held = await asyncio.to_thread(collect_cookies, server, source, ports)
    assert len(held) == ports
    for sock, cookie in held:
        sock.sendto(client_hello(cookie, sequence=1), server)
    return [sock for sock, _ in held]


def test_half_open_handshakes_from_one_address_leave_a_handshake_to_another(tmp_path: Path) -> None:
    """4cebb5c: the 8 slots are the flooder's and the other address's ClientHello goes unanswered (`busy`)."""

    async def main() -> None:
        async with listener(tmp_path, max_handshakes=8) as bound:
            flood = await half_open(bound.address, 12)
            try:
                await eventually(lambda: bound.session_count() == 8)  # every slot held by one address
                other = await device(bound.address, 0, ELSEWHERE)
                assert other.established and bound.identity(other.get_extra_info("sockname")[:2]) is not None
                assert bound.stats.evicted_handshake == 1  # the flooder's oldest half-open handshake gave way
                other.close()
            finally:
                for sock in flood:
                    sock.close()

    run(main())


def test_an_address_holds_at_most_its_share_of_handshakes_and_its_network_its_own(tmp_path: Path) -> None:
    async def main() -> None:
        async with listener(tmp_path, handshakes_per_address=3, handshakes_per_prefix=4) as bound:
            flood = await half_open(bound.address, 6)
            flood += await half_open(bound.address, 1, "127.0.0.2")  # the same /24: its network's fourth
            try:
                await eventually(lambda: bound.session_count() == 4)
                assert bound.stats.busy_address == 3  # the first address's hellos beyond its 3, unanswered
                with pytest.raises(DeviceTimeout):
                    await device(bound.address, 0, "127.0.0.3")  # a fifth from 127.0.0.0/24
                assert bound.stats.busy_prefix >= 1
                other = await device(bound.address, 0, ELSEWHERE)
                assert other.established
                other.close()
            finally:
                for sock in flood:
                    sock.close()

    run(main())


def test_a_new_session_of_an_identity_beyond_its_limit_ends_its_oldest(tmp_path: Path) -> None:
    async def main() -> None:
        async with listener(tmp_path) as bound:  # the default: 2 sessions per identity
            first, second = await device(bound.address, 0), await device(bound.address, 0)
            assert bound.session_count() == 2 and bound.stats.evicted_identity == 0
            third = await device(bound.address, 0)
            assert bound.session_count() == 2 and bound.stats.evicted_identity == 1
            await eventually(lambda: not first.established)  # told with a close_notify
            assert bound.identity(first.get_extra_info("sockname")[:2]) is None
            assert second.established and third.established
            other = await device(bound.address, 1)  # another identity is not counted with them
            assert bound.session_count() == 3 and bound.stats.evicted_identity == 1
            for each in (first, second, third, other):
                each.close()

    run(main())


def test_a_full_table_ends_its_least_recently_active_session_for_a_new_device(tmp_path: Path) -> None:
    async def main() -> None:
        async with listener(tmp_path, max_sessions=3) as bound:
            a, b, c = [await device(bound.address, n) for n in range(3)]
            records = bound.stats.records_in
            a.send(b"\x40\x00\x00\x01")  # an empty CoAP CON (a ping): a is active again, b is now the least
            await eventually(lambda: bound.stats.records_in == records + 1)
            d = await device(bound.address, 3)
            assert d.established and bound.session_count() == 3 and bound.stats.evicted_lru == 1
            await eventually(lambda: not b.established)
            assert a.established and c.established
            for each in (a, b, c, d):
                each.close()

    run(main())


def test_a_session_silent_for_the_idle_timeout_ends_and_an_active_one_stays(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with listener(tmp_path, clock=clock, idle_timeout=100.0) as bound:
            active, silent = await device(bound.address, 0), await device(bound.address, 1)
            await clock.advance(60.0)
            active.send(b"\x40\x00\x00\x01")
            await eventually(lambda: bound.stats.records_in == 1)
            await clock.advance(50.0)  # silent for 110 s, active for 50 s
            await eventually(lambda: bound.stats.evicted_idle == 1)
            await eventually(lambda: not silent.established)  # told with a close_notify
            assert active.established and bound.session_count() == 1
            # its record buffers freed between datagrams, the active one is still answered (a ping: the RST of RFC
            # 7252 §4.3)
            sent = bound.stats.records_out
            active.send(b"\x40\x00\x00\x02")
            await eventually(lambda: bound.stats.records_in == 2 and bound.stats.records_out == sent + 1)
            assert active.established
            for each in (active, silent):
                each.close()

    run(main())


def test_a_psk_device_registers_during_a_flood_of_half_open_handshakes_from_one_address(tmp_path: Path) -> None:
    """The flood runs in its own process at 1 000 cookie-echoing ClientHellos/s from 127.0.3.1 over 64 ports (the
    slots are 32 here, so the ports outnumber them as on 4cebb5c's 256); libcoap's coap-client registers from
    127.0.0.1 meanwhile. 4cebb5c: every slot is the flood's and the device's hellos go unanswered."""

    async def main() -> None:
        async with running_node(
            tmp_path, dev=False, allow_nosec=False, coaps_port=free_udp_port(), dtls_max_handshakes=32
        ) as node:
            tenant = (await node.accounts.create_account("tenant")).id
            secret = "sixteen-byte-key-of-dtls-device1"
            await node.credentials.add_psk(tenant, name(0), secret.encode().hex())
            dtls = node.lwm2m.dtls
            assert dtls is not None
            flood = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "support.dtls_flood", "127.0.0.1", str(node.coaps_port), "127.0.3.1",
                "--ports", "64", "--rate", "1000", "--seconds", "60", stdout=asyncio.subprocess.PIPE, cwd=TESTS,
            )  # fmt: skip
            try:
                assert flood.stdout is not None
                assert (await asyncio.wait_for(flood.stdout.readline(), 15)).split() == [b"ready", b"64"]
                await eventually(lambda: dtls.session_count() >= 16, within=10)  # the flood holds its handshakes
                uri = f"coaps://127.0.0.1:{node.coaps_port}/rd?ep={name(0)}&lt=60&lwm2m=1.1"
                for _ in range(3):
                    code, out = await coap_client("-m", "post", "-e", "</3/0>", uri, "-u", name(0), "-k", secret)
                    assert code == 0, out
                assert dtls.stats.handshakes >= 3
                async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{node.http_port}/metrics") as r:
                    scraped = {
                        (sample.name, tuple(sample.labels.items())): sample.value
                        for family in text_string_to_metric_families(await r.text())
                        for sample in family.samples
                    }
                assert scraped[("devicehub_dtls_events_total", (("event", "busy_address"),))] > 0  # the flood, shed
            finally:
                flood.kill()
                await flood.wait()

    run(main(), timeout=90)
