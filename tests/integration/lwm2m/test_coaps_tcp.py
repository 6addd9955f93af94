"""CoAP over TLS over TCP (`coaps+tcp://`, RFC 8323 §2, §8.2; issue 13 #5, #7) on real sockets: libcoap's
coap-client (OpenSSL build, Debian libcoap3-bin) with a PSK and with a certificate registers and is read through the
REST API; the simulator registers, is read and notifies a WebSocket app; wrong key, unknown identity and identity ≠
endpoint name are refused, each logged once; a TLS registration is not continued by another identity nor over
plain CoAP; revoking the PSK
closes the connection; handshakes are bounded and time out (clock moved)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from devicehub.clock import ManualClock, SystemClock
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Reply
from devicehub.lwm2m.dtls import server_certificate
from devicehub.lwm2m.security import ClientCredentials
from devicehub.lwm2m.tcp import StreamListener
from devicehub.lwm2m.tls_stream import TlsAcceptor
from devicehub.node import Node
from devicehub.sim.device import OMA, SimDevice
from support.apps import EventReader
from support.device_pki import TestCa
from support.node import run, running_node
from support.ports import free_tcp_port
from support.third_party import certificate_args, coap_client, refusals, start_coap_client
from support.waiting import eventually

NAME = "tls-tcp-device-0001"  # Pelion: a PSK endpoint name has 16-64 characters
OTHER = "tls-tcp-device-0002"
KEY = "sixteen-byte-key-of-tls-device-1"  # coap-client -k takes the key as text


def secure_node(tmp_path: Path, **options: object) -> contextlib.AbstractAsyncContextManager[Node]:
    """A node taking devices over coaps+tcp:// only (plain CoAP allowed when `allow_nosec` is given)."""
    fields: dict[str, object] = {"dev": False, "allow_nosec": False, "coaps_tcp_port": free_tcp_port(), **options}
    return running_node(tmp_path, **fields)  # type: ignore[arg-type]


def register_uri(node: Node, name: str = NAME) -> str:
    return f"coaps+tcp://127.0.0.1:{node.coaps_tcp_port}/rd?ep={name}&lt=60&lwm2m=1.1"


@contextlib.asynccontextmanager
async def api(node: Node, tenant: str) -> AsyncIterator[aiohttp.ClientSession]:
    _, secret = await node.accounts.create_key(tenant, "test")
    headers = {"Authorization": f"Bearer {secret}"}
    async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
        yield http


@contextlib.asynccontextmanager
async def app_events(http: aiohttp.ClientSession) -> AsyncIterator[EventReader]:
    """The account's WebSocket notification channel, as an app reads it."""
    async with http.put("/v2/notification/websocket") as r:
        assert r.status in (200, 201)
    ws = await http.ws_connect("/v2/notification/websocket-connect")
    try:
        yield EventReader(ws)
    finally:
        await ws.close()


async def read(http: aiohttp.ClientSession, events: EventReader, device_id: str, uri: str) -> dict[str, object]:
    """GET `uri` of the device through the REST API; its async response, from the channel."""
    body = {"method": "GET", "uri": uri}
    async with http.post(f"/v2/device-requests/{device_id}?async-id=r-1", json=body) as r:
        assert r.status == 202, await r.text()
    answer: dict[str, object] = await events.wait_for("async-responses", lambda e: e["id"] == "r-1")
    return answer


@contextlib.asynccontextmanager
async def tls_device(node: Node, name: str, security: ClientCredentials) -> AsyncIterator[SimDevice]:
    assert node.coaps_tcp_port is not None
    sim = SimDevice(SystemClock(), ("127.0.0.1", node.coaps_tcp_port), name, flavor=OMA, security=security, tcp=True)
    await sim.start()
    try:
        await asyncio.wait_for(sim.registered.wait(), 10)
        yield sim
    finally:
        await sim.stop()


@pytest.mark.parametrize("credential", ["psk", "certificate"])
def test_coap_client_registers_over_tls_and_is_read_through_the_rest_api(tmp_path: Path, credential: str) -> None:
    """coap-client leaves as soon as its answer is in (with -B too); `-G 4` repeats the Register once a second on
    the same connection, which stays open meanwhile: the REST read reaches it over TLS and its answer comes back.
    coap-client serves no resources, so that answer is libcoap's own 4.04."""

    async def main() -> None:
        ca = TestCa(tmp_path / "pki")
        async with secure_node(tmp_path / "svc") as node:
            tenant = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(tenant, NAME, KEY.encode().hex())
            await node.credentials.add_ca(tenant, "devices", ca.pem)
            args = ["-u", NAME, "-k", KEY] if credential == "psk" else certificate_args(ca.issue(NAME))
            client = await start_coap_client("-m", "post", "-G", "4", "-e", "</3/0>", register_uri(node), *args)
            try:
                await eventually(lambda: bool(node.lwm2m.registry.devices), within=10)
                registration = next(iter(node.lwm2m.registry.devices.values())).registration
                assert (registration.endpoint_name, registration.account_id) == (NAME, tenant)
                assert registration.secure
                async with api(node, tenant) as http, app_events(http) as events:
                    answer = await read(http, events, registration.device_id, "/3/0/0")
                assert answer["status"] == 404, answer
                assert base64.b64decode(str(answer["payload"])) == b"Not Found"  # libcoap's diagnostic payload
            finally:
                client.kill()
                await client.communicate()
            tls = node.lwm2m.coaps_tcp
            assert tls is not None and tls.stats.handshakes == 1 and tls.stats.refused == 0
            metrics = node.lwm2m.metrics()
            assert metrics["coaps_tcp_handshakes"] == 1 and metrics["coaps_tcp_received"] >= 2

    run(main())


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("wrong key", "wrong key"),
        ("unknown identity", "unknown PSK identity"),
        ("identity is not the endpoint name", "is not the endpoint name"),
        ("untrusted certificate", "not issued by a trusted CA"),
    ],
)
def test_refusals_over_tls_are_logged_once_with_their_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, reason: str
) -> None:
    async def main() -> None:
        stranger = TestCa(tmp_path / "other", "Stranger CA")
        async with secure_node(tmp_path / "svc") as node:
            tenant = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(tenant, NAME, KEY.encode().hex())
            uri = register_uri(node, "some-other-device-01" if case == "identity is not the endpoint name" else NAME)
            args = {
                "wrong key": ["-u", NAME, "-k", "another-key-entirely-16"],
                "unknown identity": ["-u", "nobody-knows-this-1", "-k", KEY],
                "identity is not the endpoint name": ["-u", NAME, "-k", KEY],
                "untrusted certificate": certificate_args(stranger.issue(NAME)),
            }[case]
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                _, out = await coap_client("-m", "post", "-e", "</3/0>", uri, *args)  # to its end: it tries once
            found = refusals(caplog)
            assert not node.lwm2m.registry.devices
            assert len(found) == 1 and reason in found[0], (found, out)

    run(main())


def test_the_simulator_registers_over_coaps_tcp_is_read_and_notifies_a_websocket_app(tmp_path: Path) -> None:
    async def main() -> None:
        key = bytes(range(16))
        async with secure_node(tmp_path, allow_nosec=True) as node:
            tenant = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(tenant, NAME, key.hex())
            psk = ClientCredentials(psk_identity=NAME, psk_key=key)
            async with tls_device(node, NAME, psk) as sim, api(node, tenant) as http, app_events(http) as events:
                device_id = sim.device_id or ""
                assert node.lwm2m.registry.devices[device_id].registration.secure
                answer = await read(http, events, device_id, "/3/0/0")
                assert answer["status"] == 200 and base64.b64decode(str(answer["payload"])) == b"devicehub"
                async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700") as r:
                    assert r.status in (200, 202), await r.text()
                await eventually(lambda: node.lwm2m.observed(device_id, "/3303/0/5700"))
                sim.set_value("/3303/0/5700", 21.5)
                note = await events.wait_for(
                    "notifications", lambda n: n["ep"] == device_id and base64.b64decode(n["payload"]) == b"21.5"
                )
                assert note["path"] == "/3303/0/5700"
                # another identity's TLS connection cannot update or de-register this registration
                await node.credentials.add_psk(tenant, OTHER, key.hex())
                async with tls_device(node, OTHER, ClientCredentials(psk_identity=OTHER, psk_key=key)) as thief:
                    target = [(codes.URI_PATH, part.encode()) for part in sim.location]
                    update = await thief.endpoint.request(
                        thief.server, codes.POST, [*target, (codes.URI_QUERY, b"lt=9")]
                    )
                    delete = await thief.endpoint.request(thief.server, codes.DELETE, target)
                    assert (update.code, delete.code) == (codes.FORBIDDEN, codes.FORBIDDEN)
                # a registration made over TLS is not continued over plain CoAP (allowed here for plain devices)
                location = "/".join(sim.location)
                _, out = await coap_client("-m", "post", f"coap://127.0.0.1:{node.coap_port}/{location}?lt=60")
                assert "4.03" in out, out
                async with http.get("/readyz") as r:
                    assert (await r.json())["security"]["coaps_tcp_port"] == node.coaps_tcp_port
            assert node.lwm2m.stats.refused_identity == 3

    run(main())


def test_revoking_the_psk_closes_the_devices_tls_connection(tmp_path: Path) -> None:
    async def main() -> None:
        key = bytes(range(32))
        async with secure_node(tmp_path) as node:
            tenant = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(tenant, NAME, key.hex())
            async with tls_device(node, NAME, ClientCredentials(psk_identity=NAME, psk_key=key)):
                tls = node.lwm2m.coaps_tcp
                assert tls is not None and tls.connection_count() == 1
                await node.credentials.delete_psk(tenant, NAME)
                assert tls.connection_count() == 0 and tls.stats.revoked == 1
                await eventually(lambda: not node.lwm2m.listeners.streams[0].connection_count())

    run(main())


def test_tls_handshakes_are_bounded_and_one_that_stalls_ends_after_the_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def nothing(*_: object) -> Reply | None:
        return None

    async def main() -> None:
        clock = ManualClock()
        certificate = server_certificate(tmp_path / "c.pem", tmp_path / "k.pem", create=True)
        acceptor = TlsAcceptor(clock, certificate, handshake_timeout=10.0, max_handshakes=1)
        listener = StreamListener(CoapEndpoint(clock, nothing), tls=acceptor)
        await listener.start("127.0.0.1", 0)
        try:
            stalled_reader, stalled = await asyncio.open_connection(*listener.address)  # says nothing
            await eventually(lambda: acceptor.handshake_count() == 1)
            busy_reader, busy = await asyncio.open_connection(*listener.address)
            assert await asyncio.wait_for(busy_reader.read(), 5) == b""  # closed at once: one handshake at a time
            assert acceptor.stats.busy == 1
            with caplog.at_level(logging.WARNING):
                await clock.advance(11.0)
                assert await asyncio.wait_for(stalled_reader.read(), 5) == b""
            assert acceptor.stats.handshake_timeouts == 1 and acceptor.handshake_count() == 0
            assert [m for m in refusals(caplog) if "not finished within 10 s" in m]
            stalled.close()
            busy.close()
        finally:
            await listener.close()

    run(main())


def test_one_address_cannot_hold_every_tls_handshake_slot(tmp_path: Path) -> None:
    """issue 28 #3, the same mistake over TLS: half-open TLS connections are bounded per address as DTLS handshakes
    are (one mechanism, lwm2m/handshake_shares.py); when every slot is taken a newcomer from an emptier network takes
    the oldest slot of the fullest one."""

    async def nothing(*_: object) -> Reply | None:
        return None

    async def main() -> None:
        clock = ManualClock()
        certificate = server_certificate(tmp_path / "c.pem", tmp_path / "k.pem", create=True)
        acceptor = TlsAcceptor(clock, certificate, max_handshakes=4, handshakes_per_address=2, handshakes_per_prefix=8)
        listener = StreamListener(CoapEndpoint(clock, nothing), tls=acceptor)
        await listener.start("127.0.0.1", 0)
        opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

        async def connect(source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            pair = await asyncio.open_connection(*listener.address, local_addr=(source, 0))  # says nothing
            opened.append(pair)
            return pair

        try:
            oldest, _ = await connect("127.0.0.1")
            await connect("127.0.0.1")
            await eventually(lambda: acceptor.handshake_count() == 2)
            third, _ = await connect("127.0.0.1")
            assert await asyncio.wait_for(third.read(), 5) == b""  # its address holds its share: closed at once
            assert acceptor.stats.busy_address == 1
            for _ in range(2):
                await connect("127.0.0.2")
            await eventually(lambda: acceptor.handshake_count() == 4)  # full, all of 127.0.0.0/24
            newcomer, _ = await connect("127.0.1.5")
            assert await asyncio.wait_for(oldest.read(), 5) == b""  # the fullest network's oldest slot ended
            await eventually(lambda: acceptor.stats.evicted_handshake == 1)
            assert acceptor.handshake_count() == 4 and not newcomer.at_eof()
        finally:
            for _, writer in opened:
                writer.close()
            await listener.close()

    run(main())
