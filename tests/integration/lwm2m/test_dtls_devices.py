"""CoAPs with the project's simulator (issue 13 #2, #4, #7): reads and observations over DTLS, no hijacking of a
registration by another identity or by plain CoAP, revocation ending sessions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from devicehub.clock import ManualClock, SystemClock
from devicehub.domain.device_results import DeviceError
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.parameters import EXCHANGE_LIFETIME
from devicehub.lwm2m.security import ClientCredentials
from devicehub.node import Node
from devicehub.sim.device import OMA, SimDevice
from support.device_pki import TestCa
from support.node import run, running_node, wait_reported
from support.ports import free_udp_port
from support.waiting import eventually

FIRST, SECOND = "dtls-first-device-01", "dtls-other-device-02"
KEY1, KEY2 = bytes(range(16)), bytes(range(16, 48))


@contextlib.asynccontextmanager
async def secure_device(node: Node, name: str, security: ClientCredentials) -> AsyncIterator[SimDevice]:
    assert node.coaps_port is not None
    sim = SimDevice(SystemClock(), ("127.0.0.1", node.coaps_port), name, flavor=OMA, security=security)
    await sim.start()
    try:
        await asyncio.wait_for(sim.registered.wait(), 10)
        yield sim
    finally:
        await sim.stop()


def psk(name: str, key: bytes) -> ClientCredentials:
    return ClientCredentials(psk_identity=name, psk_key=key)


async def tenant_with_keys(node: Node) -> str:
    tenant = (await node.accounts.create_account("tenant")).id
    await node.credentials.add_psk(tenant, FIRST, KEY1.hex())
    await node.credentials.add_psk(tenant, SECOND, "0x" + KEY2.hex().upper())
    return tenant


def test_a_psk_device_is_read_and_observed_over_dtls(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=free_udp_port()) as node:
            await tenant_with_keys(node)
            async with secure_device(node, FIRST, psk(FIRST, KEY1)) as sim:
                assert sim.device_id is not None
                assert node.lwm2m.dtls is not None
                assert node.lwm2m.dtls.cipher(sim.address) == "TLS-PSK-WITH-AES-128-CCM-8"  # RFC 7925 §4.2
                response = await node.lwm2m.request(sim.device_id, "GET", "/3/0/0")
                assert response.code == codes.CONTENT
                observed = await node.lwm2m.observe(sim.device_id, "/3303/0/5700")
                assert observed.code == codes.CONTENT
                before = node.lwm2m.stats.notifications
                sim.set_value("/3303/0/5700", 30.5)
                await eventually(lambda: node.lwm2m.stats.notifications > before)

    run(main())


def test_another_identity_cannot_update_deregister_or_notify_for_a_device(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_node(tmp_path, dev=False, allow_nosec=True, coaps_port=free_udp_port()) as node:
            await tenant_with_keys(node)
            async with (
                secure_device(node, FIRST, psk(FIRST, KEY1)) as victim,
                secure_device(node, SECOND, psk(SECOND, KEY2)) as thief,
            ):
                assert victim.device_id is not None
                await node.lwm2m.observe(victim.device_id, "/3303/0/5700")
                token = next(iter(node.lwm2m.registry.devices[victim.device_id].observations))
                location = [(codes.URI_PATH, part.encode()) for part in victim.location]
                server = thief.server
                # Update and De-register of the victim's location, from the second authenticated peer: 4.03
                update = await thief.endpoint.request(server, codes.POST, [*location, (codes.URI_QUERY, b"lt=60")])
                assert update.code == codes.FORBIDDEN
                delete = await thief.endpoint.request(server, codes.DELETE, location)
                assert delete.code == codes.FORBIDDEN
                # a notification carrying the victim's token from the thief's session is refused (RST)
                before = node.lwm2m.stats.notifications
                try:
                    await thief.endpoint.send_notification(
                        server, codes.CONTENT, token, [(codes.OBSERVE, b"\x09")], b"99", confirmable=True
                    )
                    refused = False
                except DeviceError:
                    refused = True
                assert refused and node.lwm2m.stats.notifications == before
                # and over plain CoAP (allowed on this node for plain devices) nobody continues a DTLS registration
                plain = SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), "plain-intruder", flavor=OMA)
                await plain.start(lifecycle=False)
                try:
                    coap = ("127.0.0.1", node.coap_port)
                    update = await plain.endpoint.request(coap, codes.POST, location)
                    assert update.code == codes.FORBIDDEN
                    register = await plain.endpoint.request(
                        coap,
                        codes.POST,
                        [(codes.URI_PATH, b"rd"), (codes.URI_QUERY, f"ep={FIRST}".encode())],
                        b"</3/0>",
                    )
                    assert register.code == codes.FORBIDDEN
                finally:
                    await plain.stop(deregister=False)
                assert node.lwm2m.registry.devices[victim.device_id].registration.address == victim.address
                assert node.lwm2m.stats.refused_identity >= 4

    run(main())


def test_revoking_a_psk_or_a_ca_ends_the_devices_sessions(tmp_path: Path) -> None:
    async def main() -> None:
        ca = TestCa(tmp_path / "pki")
        issued = ca.issue(SECOND)
        async with running_node(tmp_path / "svc", dev=False, allow_nosec=False, coaps_port=free_udp_port()) as node:
            tenant = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(tenant, FIRST, KEY1.hex())
            authority = await node.credentials.add_ca(tenant, "devices", ca.pem)
            certificate = ClientCredentials(cert_file=str(issued.cert_file), key_file=str(issued.key_file))
            async with secure_device(node, FIRST, psk(FIRST, KEY1)), secure_device(node, SECOND, certificate) as sim:
                dtls = node.lwm2m.dtls
                assert dtls is not None and dtls.session_count() == 2
                assert dtls.identity(sim.address) is not None
                await node.credentials.delete_psk(tenant, FIRST)
                assert dtls.session_count() == 1 and dtls.stats.revoked == 1
                await node.credentials.remove_ca(tenant, authority.id)
                assert dtls.session_count() == 0 and dtls.stats.revoked == 2

    run(main())


def test_the_dtls_endpoint_has_the_per_source_rate_limit_and_is_reported_and_swept(tmp_path: Path) -> None:
    """The CoAPs endpoint was built without the server's limits: a DTLS peer was never rate limited, and its
    tables were neither swept nor reported."""

    async def main() -> None:
        clock = ManualClock()  # not moved: the rate limit's bucket does not refill
        async with running_node(
            tmp_path, clock=clock, dev=False, allow_nosec=False, coaps_port=free_udp_port(), coap_rate_limit=1.0
        ) as node:
            await tenant_with_keys(node)
            async with secure_device(node, FIRST, psk(FIRST, KEY1)) as sim:  # its Register takes one of two
                assert node.coaps_port is not None
                server = ("127.0.0.1", node.coaps_port)
                asks = [
                    asyncio.ensure_future(sim.endpoint.request(server, codes.GET, [(codes.URI_PATH, b"nothing")]))
                    for _ in range(5)
                ]
                try:
                    await eventually(lambda: node.lwm2m.metrics().get("coaps_rate_limited", 0) >= 4)
                    assert sum(ask.done() for ask in asks) <= 1  # what the limit dropped is not answered
                finally:
                    for ask in asks:
                        ask.cancel()
                    await asyncio.gather(*asks, return_exceptions=True)
                metrics = node.lwm2m.metrics()
                assert metrics["coaps_dedup_entries"] >= 2 and metrics["coaps_rate_buckets"] == 1
                assert metrics["coap_rate_limited"] == 0  # the plain endpoint's own figures stay apart
                await clock.advance(EXCHANGE_LIFETIME + 1)  # the periodic timer sweeps the DTLS endpoint too
                assert node.lwm2m.metrics()["coaps_dedup_entries"] == 0

    run(main())


def test_a_dtls_devices_notifications_take_the_lane_until_its_session_ends(tmp_path: Path) -> None:
    """Issue 15 #2 over DTLS: once the server accepted a notification of the session's identity, the next ones are
    taken from the decrypted records by the DTLS listener's lane (acknowledged through the session); the session's
    end (here its credential revoked) disarms them, whatever identity the address shows next."""

    async def main() -> None:
        async with running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=free_udp_port()) as node:
            tenant = await tenant_with_keys(node)
            async with secure_device(node, FIRST, psk(FIRST, KEY1)) as sim:
                assert sim.device_id is not None
                assert (await node.lwm2m.observe(sim.device_id, "/3303/0/5700")).code == codes.CONTENT
                metrics = node.lwm2m.metrics
                for n, value in enumerate((30.5, 31.5, 32.5, 33.5)):
                    sim.set_value("/3303/0/5700", value)
                    await wait_reported(node, sim.device_id, "/3303/0/5700", f"{value}".encode())
                    assert metrics()["coaps_lane_armed"] == 1
                    assert metrics()["coaps_lane_taken"] == n  # the first went the Python path and armed it
                assert metrics().get("coap_lane_taken", 0) == 0  # plain CoAP is not allowed here: no plain lane
                sim.confirmable_notifications = True  # a CON one: its ACK goes back through the session
                sim.set_value("/3303/0/5700", 34.5)
                await wait_reported(node, sim.device_id, "/3303/0/5700", b"34.5")
                await eventually(lambda: sim.counters.acked == 1)
                assert metrics()["coaps_lane_taken"] == 4 and metrics()["coaps_lane_acked"] == 1
                await node.credentials.delete_psk(tenant, FIRST)
                assert metrics()["coaps_lane_armed"] == 0

    run(main())
