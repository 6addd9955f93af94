"""Edge Core over coaps://, coaps+tcp:// and coap+tcp:// (issue 13 #7). Over (D)TLS the gateway registers with its
PSK, its children register under the gateway's identity (`gw=` that identity), and the service keeps the identity rules
for them: no child that has credentials of its own or registered itself, and nobody but the gateway continues a
child's registration. Over TCP each child has a connection of its own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from devicehub.clock import SystemClock
from devicehub.lwm2m import codes
from devicehub.lwm2m.security import ClientCredentials
from devicehub.node import Node
from devicehub.sim.device import OMA, SimDevice
from support.edge import TranslatorClient, edge_core, local_session
from support.edge import float_objects as objects
from support.node import run, running_node
from support.ports import free_tcp_port, free_udp_port
from support.waiting import eventually

GATEWAY, DEVICE, OTHER = "edge-gateway-00001", "own-key-device-0001", "another-device-0002"
KEY = bytes(range(16))


def secure_node(tmp_path: Path) -> contextlib.AbstractAsyncContextManager[Node]:
    return running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=free_udp_port())


async def tenant(node: Node) -> str:
    account = (await node.accounts.create_account("tenant")).id
    for name in (GATEWAY, DEVICE, OTHER):
        await node.credentials.add_psk(account, name, KEY.hex())
    return account


@contextlib.asynccontextmanager
async def peer(node: Node, identity: str) -> AsyncIterator[SimDevice]:
    """A DTLS peer authenticated as `identity` that sends what the test says (no lifecycle of its own)."""
    assert node.coaps_port is not None
    sim = SimDevice(
        SystemClock(),
        ("127.0.0.1", node.coaps_port),
        identity,
        flavor=OMA,
        security=ClientCredentials(psk_identity=identity, psk_key=KEY),
    )
    await sim.start(lifecycle=False)
    try:
        yield sim
    finally:
        await sim.stop(deregister=False)


async def register(sim: SimDevice, name: str, gateway: str) -> tuple[int, list[str]]:
    """A Register of endpoint `name` with `gw=gateway` from `sim`'s session: (code, Location-Path)."""
    if sim.dtls is not None and not sim.dtls.established:
        await sim.dtls.handshake()
    options = [(codes.URI_PATH, b"rd"), (codes.URI_QUERY, f"ep={name}".encode())]
    options.append((codes.URI_QUERY, f"gw={gateway}".encode()))
    reply = await sim.endpoint.request(sim.server, codes.POST, options, b"</3303/0>")
    return reply.code, reply.location_path


def test_edge_core_over_coaps_registers_itself_and_its_child_under_its_psk(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with secure_node(tmp_path / "svc") as node:
            account = await tenant(node)
            server = f"coaps://127.0.0.1:{node.coaps_port}"
            async with edge_core(tmp_path, 0, server=server, endpoint_name=GATEWAY, psk_key=KEY.hex()) as core:
                await eventually(lambda: core.client.status.status == "connected", within=10.0)
                assert core.client.status.account_id == account
                async with local_session(tmp_path) as local:
                    translator = TranslatorClient(await local.ws_connect("http://edge/1/pt"))
                    assert (await translator.call("protocol_translator_register", {"name": "pt"}))["result"] == "ok"
                    added = await translator.call("device_register", {"deviceId": "child-1", "objects": objects(19.5)})
                    assert added["result"] == "ok", added
                    child = core.children.get("child-1")
                    assert child is not None and child.device.device_id is not None
                    registration = node.lwm2m.registry.devices[child.device.device_id].registration
                    assert (registration.secure, registration.gateway, registration.account_id) == (
                        True,
                        GATEWAY,
                        account,
                    )
                    assert node.lwm2m.dtls is not None
                    assert node.lwm2m.dtls.identity(child.device.address) is not None
                    read = await node.lwm2m.request(child.device.device_id, "GET", "/3303/0/5700")
                    assert read.code == codes.CONTENT
                    assert read.payload == b"19.5", read.payload
                    await translator.ws.close()

    run(scenario())


def test_a_gateway_identity_registers_no_device_with_credentials_and_continues_only_its_own_children(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with secure_node(tmp_path) as node:
            await tenant(node)
            async with peer(node, GATEWAY) as gateway, peer(node, OTHER) as other:
                # an identity is a gateway only while it holds a registration of its own: before, no children
                code, _ = await register(gateway, "plain-child-0001", GATEWAY)
                assert code == codes.FORBIDDEN
                code, _ = await register(gateway, GATEWAY, "")
                assert code == codes.CREATED
                # a child name that has a PSK of its own speaks for itself: 4.03, logged with why
                code, _ = await register(gateway, DEVICE, GATEWAY)
                assert code == codes.FORBIDDEN
                # gw= must be the identity itself: another peer cannot register children for the gateway
                code, _ = await register(other, "plain-child-0001", GATEWAY)
                assert code == codes.FORBIDDEN
                code, location = await register(gateway, "plain-child-0001", GATEWAY)
                assert code == codes.CREATED
                path = [(codes.URI_PATH, part.encode()) for part in location]
                # the gateway continues its child's registration; another identity does not
                update = await gateway.endpoint.request(gateway.server, codes.POST, path)
                assert update.code == codes.CHANGED
                hijack = await other.endpoint.request(other.server, codes.POST, path)
                assert hijack.code == codes.FORBIDDEN
                delete = await other.endpoint.request(other.server, codes.DELETE, path)
                assert delete.code == codes.FORBIDDEN
                assert node.lwm2m.stats.refused_identity >= 4

    run(scenario())


def test_a_gateway_identity_takes_no_registration_a_device_made_itself(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with secure_node(tmp_path) as node:
            account = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(account, GATEWAY, KEY.hex())
            ca_device = "self-made-device-01"  # registers itself (here with a PSK added, then removed)
            await node.credentials.add_psk(account, ca_device, KEY.hex())
            async with peer(node, ca_device) as device:
                code, _ = await register(device, ca_device, "")
                assert code == codes.CREATED
            await node.credentials.delete_psk(account, ca_device)  # as a certificate device: no PSK to look up
            async with peer(node, GATEWAY) as gateway:
                code, _ = await register(gateway, GATEWAY, "")
                assert code == codes.CREATED
                code, _ = await register(gateway, ca_device, GATEWAY)
                assert code == codes.FORBIDDEN

    run(scenario())


def test_edge_core_over_coap_tcp_registers_itself_and_its_child_on_connections_of_their_own(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path / "svc", coap_tcp_port=free_tcp_port()) as node:
            server = f"coap+tcp://127.0.0.1:{node.coap_tcp_port}"
            async with edge_core(tmp_path, 0, server=server) as core, local_session(tmp_path) as local:
                await eventually(lambda: core.client.status.status == "connected", within=10.0)
                translator = TranslatorClient(await local.ws_connect("http://edge/1/pt"))
                assert (await translator.call("protocol_translator_register", {"name": "pt"}))["result"] == "ok"
                added = await translator.call("device_register", {"deviceId": "child-1", "objects": objects(7.5)})
                assert added["result"] == "ok", added
                child = core.children.get("child-1")
                assert child is not None and child.device.device_id is not None and child.device.tcp
                read = await node.lwm2m.request(child.device.device_id, "GET", "/3303/0/5700")
                assert (read.code, read.payload) == (codes.CONTENT, b"7.5")
                await translator.ws.close()

    run(scenario())


def test_edge_core_over_coaps_tcp_registers_itself_and_its_child_under_its_psk(tmp_path: Path) -> None:
    """The same over TLS over TCP (`coaps+tcp://`): each child has a TLS connection of its own, with the gateway's
    PSK, and registers under the gateway's identity."""

    async def scenario() -> None:
        async with running_node(tmp_path / "svc", dev=False, allow_nosec=False, coaps_tcp_port=free_tcp_port()) as node:
            account = await tenant(node)
            server = f"coaps+tcp://127.0.0.1:{node.coaps_tcp_port}"
            async with edge_core(tmp_path, 0, server=server, endpoint_name=GATEWAY, psk_key=KEY.hex()) as core:
                await eventually(lambda: core.client.status.status == "connected", within=10.0)
                async with local_session(tmp_path) as local:
                    translator = TranslatorClient(await local.ws_connect("http://edge/1/pt"))
                    assert (await translator.call("protocol_translator_register", {"name": "pt"}))["result"] == "ok"
                    added = await translator.call("device_register", {"deviceId": "child-1", "objects": objects(3.5)})
                    assert added["result"] == "ok", added
                    child = core.children.get("child-1")
                    assert child is not None and child.device.device_id is not None and child.device.tcp
                    registration = node.lwm2m.registry.devices[child.device.device_id].registration
                    assert (registration.secure, registration.gateway, registration.account_id) == (
                        True,
                        GATEWAY,
                        account,
                    )
                    read = await node.lwm2m.request(child.device.device_id, "GET", "/3303/0/5700")
                    assert (read.code, read.payload) == (codes.CONTENT, b"3.5")
                    tls = node.lwm2m.coaps_tcp
                    assert tls is not None and tls.connection_count() == 2 and tls.stats.handshakes == 2
                    await translator.ws.close()

    run(scenario())


def test_a_restarted_node_lets_the_gateway_continue_its_childs_registration_and_no_one_else(tmp_path: Path) -> None:
    """A child's registration is stored with the gateway it was made through (`gw=`), so the node that takes it up
    after a restart (or another node, in Redis mode) accepts the gateway's Update of it and still refuses another
    identity's; restored without it, the gateway's Update was refused and the child counted as a gateway itself."""

    async def scenario() -> None:
        port = free_udp_port()
        async with running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=port) as node:
            await tenant(node)
            async with peer(node, GATEWAY) as gateway:
                assert (await register(gateway, GATEWAY, ""))[0] == codes.CREATED
                code, location = await register(gateway, "plain-child-0001", GATEWAY)
                assert code == codes.CREATED
            await node.lwm2m.flush()
        path = [(codes.URI_PATH, part.encode()) for part in location]
        async with running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=port) as node:
            child = node.lwm2m.registry.devices[location[-1]].registration
            assert (child.gateway, child.secure) == (GATEWAY, True)
            async with peer(node, GATEWAY) as gateway, peer(node, OTHER) as other:
                for sim in (gateway, other):
                    assert sim.dtls is not None
                    await sim.dtls.handshake()
                assert (await gateway.endpoint.request(gateway.server, codes.POST, path)).code == codes.CHANGED
                assert (await other.endpoint.request(other.server, codes.POST, path)).code == codes.FORBIDDEN

    run(scenario())
