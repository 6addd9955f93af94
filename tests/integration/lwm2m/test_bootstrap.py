"""The bootstrap server over real UDP (LwM2M 1.1 Core §5.2, §6.1): the simulator bootstraps, then registers with
devicehub; unconfigured endpoints are refused; malformed or failing exchanges end one session, not the server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from devicehub._core import CoapMessage, coap_decode, coap_encode, tlv_decode
from devicehub.clock import SystemClock
from devicehub.config import ServeSettings
from devicehub.domain.model import BootstrapConfig
from devicehub.lwm2m import codes
from devicehub.lwm2m.bootstrap import security_instance, server_instance
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.node import Node
from devicehub.sim.bootstrap import BootstrapClient
from devicehub.sim.device import OMA, SimDevice
from support.node import run
from support.ports import free_udp_port
from support.receive_buffer import holds_burst
from support.waiting import eventually


@contextlib.asynccontextmanager
async def bootstrap_node(data_dir: Path, *, dev: bool = True, allow_nosec: bool = False) -> AsyncIterator[Node]:
    settings = ServeSettings(
        host="127.0.0.1",
        http_port=0,
        coap_port=0,
        coaps_port=0,
        bootstrap_port=free_udp_port(),
        data_dir=data_dir,
        dev=dev,
        allow_nosec=allow_nosec,  # plain CoAP bootstrap needs it without --dev (issue 28 #6)
    )
    node = Node(settings)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


def bootstrapping(node: Node, name: str, **options: object) -> SimDevice:
    sim = SimDevice(SystemClock(), ("127.0.0.1", 9), name, flavor=OMA, **options)  # type: ignore[arg-type]
    sim.bootstrap = BootstrapClient(sim.model, sim.clock, name, f"coap://127.0.0.1:{node.bootstrap_port}")
    return sim


async def raw_request(port: int, code: int, path: str, query: list[str], mid: int = 0x1234) -> CoapMessage:
    """One CON request from a plain UDP socket, as a client that is not ours would send it."""
    options = [(codes.URI_PATH, s.encode()) for s in path.split("/") if s]
    options += [(codes.URI_QUERY, q.encode()) for q in query]
    return await raw_datagram(port, coap_encode(codes.CON, code, mid, b"\x01\x02", options, b""))


async def raw_datagram(port: int, data: bytes) -> CoapMessage:
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        sock.connect(("127.0.0.1", port))
        await loop.sock_sendall(sock, data)
        reply = await asyncio.wait_for(loop.sock_recv(sock, 2048), 5)
    return coap_decode(reply)


def test_simulated_device_bootstraps_from_its_rest_configuration_then_registers_and_is_listed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with bootstrap_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            uri = f"coap://127.0.0.1:{node.coap_port}"
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                body = {"server_uri": uri, "lifetime": 120, "short_server_id": 7, "binding": "U"}
                async with http.put("/v3/bootstrap-configs/bs-1", json=body) as r:
                    assert r.status == 201, await r.text()
                sim = bootstrapping(node, "bs-1")
                await sim.start()
                try:
                    await asyncio.wait_for(sim.registered.wait(), 10)
                    assert sim.bootstrap is not None
                    # Leshan's order with Discover first; Wakaama answers each of these
                    assert sim.bootstrap.requests == [
                        ("GET", "/"),
                        ("DELETE", "/0"),
                        ("DELETE", "/1"),
                        ("PUT", "/0/1"),
                        ("PUT", "/1/0"),
                        ("POST", "/bs"),
                    ]
                    security, server = sim.model.objects[0][1], sim.model.objects[1][0]
                    assert security[0].value == uri and security[1].value is False and security[2].value == 3
                    assert security[10].value == 7 and server[0].value == 7 and server[1].value == 120
                    assert sim.model.objects[0][0][1].value is True  # the bootstrap account was kept
                    registration = node.lwm2m.registration(sim.device_id or "")
                    assert registration is not None and registration.lifetime == 120
                    assert "/0/1" not in {link.path for link in registration.links}  # Security is never announced
                    assert node.bootstrap is not None and node.bootstrap.outcomes["bs-1"] == "completed"
                    async with http.get("/v3/devices") as r:
                        names = [d["endpoint_name"] for d in (await r.json())["data"]]
                    assert names == ["bs-1"]
                    # issue 32 #3: the bootstrap is in the device's lifecycle history, before its Register, and counted
                    async with http.get(f"/v3/device-events?device_id={sim.device_id}") as r:
                        events = [e["event_type"] for e in (await r.json())["data"]]
                    assert events == ["bootstrapped", "registered"]
                    query = "include=bootstraps_successful,bootstraps_failed&interval=1d&period=1d"
                    async with http.get(f"/v3/metrics?{query}") as r:
                        (day,) = (await r.json())["data"]
                    assert (day["bootstraps_successful"], day["bootstraps_failed"]) == (1, 0)
                finally:
                    await sim.stop()

    run(scenario())


def test_bootstrap_writes_security_and_server_instances_in_leshans_tlv_layout() -> None:
    config = BootstrapConfig(
        endpoint_name="x",
        account_id="",
        server_uri="coap://h:5683",
        security_mode=3,
        short_server_id=1,
        lifetime=300,
        binding="U",
        created_at=0.0,
        updated_at=0.0,
    )
    # resource TLVs (no instance wrapper), ids 0,1,2,3,4,5,10 / 0,1,6,7 as Leshan's BootstrapUtil writes them
    assert server_instance(config) == bytes.fromhex("c10001c201012cc10600c10755")
    assert security_instance(config)[:16] == bytes.fromhex("c8000d") + b"coap://h:5683"  # id 0, 13-byte length
    nodes = tlv_decode(security_instance(config))
    assert [n.id for n in nodes] == [0, 1, 2, 3, 4, 5, 10]
    assert [n.value for n in nodes][1:] == [b"\x00", b"\x03", b"", b"", b"", b"\x01"]


def test_dev_mode_sends_an_unconfigured_endpoint_to_the_service_itself(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with bootstrap_node(tmp_path) as node:
            sim = bootstrapping(node, "bs-dev")
            await sim.start()
            try:
                await asyncio.wait_for(sim.registered.wait(), 10)
                assert sim.server == ("127.0.0.1", node.coap_port)
                assert sim.counters.bootstraps == 1 and sim.counters.bootstrap_failures == 0
            finally:
                await sim.stop()

    run(scenario())


def test_an_endpoint_without_configuration_is_refused_and_the_simulator_counts_the_failure(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with bootstrap_node(tmp_path, dev=False, allow_nosec=True) as node:
            answer = await raw_request(node.bootstrap_port, codes.POST, "/bs", ["ep=stranger", "pct=11542"])
            assert answer.code == codes.BAD_REQUEST and answer.payload == b"no bootstrap configuration"
            sim = bootstrapping(node, "stranger")
            await sim.start()
            try:
                await eventually(lambda: sim.counters.bootstrap_failures >= 1)
                assert not sim.registered.is_set() and sim.counters.registrations == 0
            finally:
                await sim.stop()
            assert node.bootstrap is not None and node.bootstrap.stats.refused >= 2

    run(scenario())


class _OddClient:
    """A device that starts a bootstrap and then answers one step badly."""

    def __init__(
        self, discover: bytes, write_code: int = codes.CHANGED, finish_code: int = codes.NOT_ACCEPTABLE
    ) -> None:
        self.discover, self.write_code, self.finish_code = discover, write_code, finish_code
        self.seen: list[tuple[int, str]] = []

    async def handle(self, message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        self.seen.append((message.code, message.uri_path))
        if message.code == codes.GET:
            return Reply(codes.CONTENT, [(codes.CONTENT_FORMAT, b"\x28")], self.discover)
        if message.code == codes.DELETE:
            return Reply(codes.DELETED)
        if message.code == codes.PUT:
            return Reply(self.write_code)
        return Reply(self.finish_code)


def test_malformed_bootstrap_exchanges_end_their_session_and_the_server_keeps_serving(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with bootstrap_node(tmp_path) as node:
            port = node.bootstrap_port
            assert node.bootstrap is not None
            assert (await raw_request(port, codes.POST, "/bs", [], mid=1)).code == codes.BAD_REQUEST
            assert (await raw_request(port, codes.POST, "/bs", ["ep=" + "x" * 65], mid=2)).code == codes.BAD_REQUEST
            assert (await raw_request(port, codes.POST, "/bs", ["ep=a", "pct=json"], mid=3)).code == codes.BAD_REQUEST
            assert (await raw_request(port, codes.GET, "/bs", ["ep=a"], mid=4)).code == codes.METHOD_NOT_ALLOWED
            assert (await raw_request(port, codes.POST, "/rd", ["ep=a"], mid=5)).code == codes.NOT_FOUND
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.sendto(b"\xff\x00garbage", ("127.0.0.1", port))  # not CoAP: dropped and counted
            cases = {
                "odd-links": _OddClient(b"<0/0;;;,\xff"),  # not link format (not even UTF-8)
                "odd-write": _OddClient(b"</>;lwm2m=1.1,</0/0>", write_code=codes.BAD_REQUEST),
                "odd-finish": _OddClient(b"</>;lwm2m=1.1,</0/0>"),  # refuses Bootstrap-Finish with 4.06
            }
            for name, client in cases.items():
                endpoint = await CoapEndpoint.bind("127.0.0.1", 0, SystemClock(), client.handle)
                try:
                    options = [(codes.URI_PATH, b"bs"), (codes.URI_QUERY, f"ep={name}".encode())]
                    response = await endpoint.request(("127.0.0.1", port), codes.POST, options)
                    assert response.code == codes.CHANGED
                    await eventually(lambda name=name: name in node.bootstrap.outcomes)  # type: ignore[union-attr]
                    assert node.bootstrap.outcomes[name].startswith("failed")
                finally:
                    await endpoint.close()
            assert cases["odd-write"].seen[-1] == (codes.PUT, "/0/1")  # nothing after the refused write
            assert cases["odd-finish"].seen[-1] == (codes.POST, "/bs")
            assert node.bootstrap.stats.failed == 3 and node.bootstrap.stats.malformed == 3
            await eventually(lambda: node.bootstrap is not None and node.bootstrap.metrics()["bootstrap_sessions"] == 0)
            # and a well-behaved device still bootstraps
            sim = bootstrapping(node, "after-odd")
            await sim.start()
            try:
                await asyncio.wait_for(sim.registered.wait(), 10)
            finally:
                await sim.stop()

    run(scenario())


def test_a_discover_answer_with_non_ascii_digits_is_read_and_the_session_still_ends_counted(tmp_path: Path) -> None:
    """`'²'.isdigit()` is true and `int('²')` raises: `</0/²>` once killed the session task unhandled."""

    async def scenario() -> None:
        async with bootstrap_node(tmp_path) as node:
            assert node.bootstrap is not None
            # </0/²> is no instance; the bootstrap account is /0/3 (no ssid), so the server account goes to /0/0
            client = _OddClient("</>;lwm2m=1.1,</0/²>,</0/0>;ssid=101,</0/3>".encode(), finish_code=codes.CHANGED)
            endpoint = await CoapEndpoint.bind("127.0.0.1", 0, SystemClock(), client.handle)
            try:
                options = [(codes.URI_PATH, b"bs"), (codes.URI_QUERY, b"ep=odd-digits")]
                assert (await endpoint.request(("127.0.0.1", node.bootstrap_port), codes.POST, options)).code == (
                    codes.CHANGED
                )
                await eventually(lambda: "odd-digits" in node.bootstrap.outcomes)  # type: ignore[union-attr]
            finally:
                await endpoint.close()
            assert node.bootstrap.outcomes["odd-digits"] == "completed"
            assert (codes.PUT, "/0/0") in client.seen and node.bootstrap.stats.completed == 1
            # a pct of non-ASCII digits is no content-format number
            answer = await raw_request(node.bootstrap_port, codes.POST, "/bs", ["ep=odd-pct", "pct=1\u00b2"])
            assert answer.code == codes.BAD_REQUEST and node.bootstrap.stats.malformed == 1

    run(scenario())


BURST = 600  # 1 KiB Bootstrap-Requests: ~1.4 MiB of kernel buffer, where the default 208 KiB holds about 90


@holds_burst(2 * BURST * 1024)
def test_a_burst_of_bootstrap_requests_sent_while_the_loop_is_busy_is_read_whole(tmp_path: Path) -> None:
    """The bootstrap listener asks for the same receive buffer as the LwM2M one (issue 16: a fleet that bootstraps at
    once after an outage is a storm too). The burst is sent while the loop cannot read (no await between the
    sends), then every request must reach the server: each is refused (no configuration), and counted."""

    async def scenario() -> None:
        async with bootstrap_node(tmp_path, dev=False, allow_nosec=True) as node:
            assert node.bootstrap is not None
            peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                for mid in range(BURST):  # no await: the loop reads none of them meanwhile
                    options = [(codes.URI_PATH, b"bs"), (codes.URI_QUERY, f"ep=burst-{mid}".encode())]
                    request = coap_encode(codes.NON, codes.POST, mid, mid.to_bytes(2, "big"), options, bytes(1024))
                    peer.sendto(request, ("127.0.0.1", node.bootstrap_port))
                server = node.bootstrap
                await eventually(lambda: server.stats.refused == BURST, within=10)
                assert server.stats.requests == BURST
            finally:
                peer.close()

    run(scenario())
