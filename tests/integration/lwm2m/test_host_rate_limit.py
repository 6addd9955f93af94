"""The CoAP rate limit bounds a host, not only each of its source ports (issue 28 #5), over real sockets: 50 ports on
one IP were answered 50 times as often as one port; now they share their host's allowance (UDP over IPv4 and IPv6,
TCP connections, DTLS sessions), a single port is still held to its own, and /metrics counts what each bound
dropped."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from devicehub._core import CoapMessage, coap_decode, coap_encode
from devicehub.clock import ManualClock, SystemClock
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.coap.parameters import Limits
from devicehub.lwm2m.security import ClientCredentials
from devicehub.lwm2m.tcp import CSM, decode_frame, encode_frame, options_body
from devicehub.sim.device import OMA, SimDevice
from support.node import run, running_node
from support.ports import free_tcp_port, free_udp_port
from support.waiting import eventually


def _con(mid: int) -> bytes:
    return coap_encode(codes.CON, codes.GET, mid, mid.to_bytes(2, "big"), [(codes.URI_PATH, b"nothing")], b"")


@contextlib.contextmanager
def _sockets(count: int, family: socket.AddressFamily = socket.AF_INET) -> Iterator[list[socket.socket]]:
    """`count` UDP sockets of one host: the same address, each its own source port."""
    socks = [socket.socket(family, socket.SOCK_DGRAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.setblocking(False)
        yield socks
    finally:
        for sock in socks:
            sock.close()


def _drain(socks: list[socket.socket]) -> list[int]:
    """How many answers each socket holds now (read without waiting)."""
    counts = []
    for sock in socks:
        n = 0
        with contextlib.suppress(BlockingIOError):
            while sock.recv(2048):
                n += 1
        counts.append(n)
    return counts


async def _answered(socks: list[socket.socket], total: int) -> list[int]:
    """Answers per socket, once `total` have come (bounded wait on the condition)."""
    counts = [0] * len(socks)

    def enough() -> bool:
        for i, n in enumerate(_drain(socks)):
            counts[i] += n
        return sum(counts) >= total

    await eventually(enough)
    return counts


async def _server(clock: ManualClock, limits: Limits, host: str = "127.0.0.1") -> tuple[CoapEndpoint, list[Address]]:
    served: list[Address] = []

    async def handle(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        served.append(remote)
        return Reply(codes.NOT_FOUND)

    return await CoapEndpoint.bind(host, 0, clock, handle, limits=limits), served


def test_fifty_source_ports_of_one_host_share_its_allowance() -> None:
    """50 ports × 4 requests with a host burst of 20 (the clock stands still, nothing refills): 20 are answered, not
    200, though no port is over its own rate; a dropped request's retransmission is taken once the host refills."""

    async def scenario() -> None:
        clock = ManualClock()
        limits = Limits(
            requests_per_second=1.0, request_burst=100.0, host_requests_per_second=1.0, host_request_burst=20
        )
        server, served = await _server(clock, limits)
        try:
            with _sockets(50) as socks:
                for mid in range(4):
                    for sock in socks:
                        sock.sendto(_con(mid), server.address)
                await eventually(lambda: server.stats.received == 200)
                answered = await _answered(socks, 20)
                await eventually(lambda: server.stats.host_rate_limited == 180)
                assert sum(answered) + sum(_drain(socks)) == 20 and len(served) == 20
                assert server.stats.rate_limited == 0 and server.table_sizes()["host_rate_buckets"] == 1
                late = next(sock for sock, n in zip(socks, answered, strict=True) if n < 4)
                await clock.advance(1.0)  # one token for the host
                late.sendto(_con(3), server.address)  # the device retransmits a dropped CON request
                reply = coap_decode(await asyncio.wait_for(asyncio.get_running_loop().sock_recv(late, 2048), 5))
                assert (reply.mid, reply.code) == (3, codes.NOT_FOUND) and len(served) == 21
        finally:
            await server.close()

    run(scenario())


def test_one_port_is_held_to_its_own_rate_and_its_excess_leaves_the_host_allowance_to_its_neighbours() -> None:
    """A single port over its own bucket is dropped by the per-address bound (cause address), before it spends the
    allowance its host shares: the other ports of the host (devices behind the same NAT) get the rest of it."""

    async def scenario() -> None:
        clock = ManualClock()
        limits = Limits(requests_per_second=1.0, request_burst=3.0, host_requests_per_second=1.0, host_request_burst=10)
        server, served = await _server(clock, limits)
        try:
            with _sockets(1) as (flooder,), _sockets(8) as neighbours:
                for mid in range(20):
                    flooder.sendto(_con(mid), server.address)
                await eventually(lambda: server.stats.received == 20)
                assert await _answered([flooder], 3) == [3]
                assert server.stats.rate_limited == 17 and server.stats.host_rate_limited == 0
                for sock in neighbours:
                    sock.sendto(_con(100), server.address)
                await eventually(lambda: server.stats.received == 28)
                answered = await _answered(neighbours, 7)  # the host's 10 less the flooder's 3
                await eventually(lambda: server.stats.host_rate_limited == 1)
                assert sum(answered) + sum(_drain(neighbours)) == 7 and len(served) == 10
        finally:
            await server.close()

    run(scenario())


def test_ipv6_source_ports_share_the_allowance_of_their_host() -> None:
    """The same over IPv6 (::1, a /64 of its own): many ports, one allowance."""

    async def scenario() -> None:
        clock = ManualClock()
        limits = Limits(host_requests_per_second=1.0, host_request_burst=5)
        server, served = await _server(clock, limits, host="::1")
        try:
            with _sockets(12, socket.AF_INET6) as socks:
                for sock in socks:
                    sock.sendto(_con(1), server.address)
                await eventually(lambda: server.stats.host_rate_limited == 7)
                assert sum(await _answered(socks, 5)) == 5 and len(served) == 5
        finally:
            await server.close()

    run(scenario())


async def _tcp_get(port: int, token: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode_frame(CSM, b"", b"") + encode_frame(codes.GET, token, options_body([(codes.URI_PATH, b"x")])))
    return reader, writer


async def _read_frames(reader: asyncio.StreamReader, codes_seen: list[int]) -> None:
    """Append the code of every frame that comes on a connection (the server's CSM among them)."""
    buffer = b""
    while chunk := await reader.read(4096):
        buffer += chunk
        while (decoded := decode_frame(buffer)) is not None:
            frame, used = decoded
            codes_seen.append(frame.code)
            buffer = buffer[used:]


def test_connections_of_one_host_share_its_allowance_over_coap_tcp_and_metrics_count_each_cause(
    tmp_path: Path,
) -> None:
    """Over CoAP/TCP each connection is a source address of its own: 8 of them from one host with a host burst of 5
    get 5 answers. /metrics counts the drops by listener and cause: address for one UDP port over its own rate,
    host for the TCP connections beyond their host's."""

    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(
            tmp_path,
            clock=clock,
            coap_tcp_port=free_tcp_port(),
            coap_rate_limit=1.0,  # 2 at once
            coap_host_rate_limit=1.0,
            coap_host_rate_burst=5.0,
        ) as node:
            assert node.coap_tcp_port is not None
            connections = [await _tcp_get(node.coap_tcp_port, bytes([i])) for i in range(8)]
            seen: list[int] = []
            readers = [asyncio.ensure_future(_read_frames(reader, seen)) for reader, _ in connections]
            try:
                await eventually(lambda: node.lwm2m.metrics().get("coap_tcp_host_rate_limited", 0) == 3)
                await eventually(lambda: seen.count(codes.NOT_FOUND) == 5)  # all that was taken is answered
                assert node.lwm2m.metrics()["coap_tcp_rate_limited"] == 0
            finally:
                for task in readers:
                    task.cancel()
                await asyncio.gather(*readers, return_exceptions=True)
                for _, writer in connections:
                    writer.close()
            with _sockets(1) as (sock,):  # UDP: the host's own bucket is the listener's, apart from TCP's
                for mid in range(4):
                    sock.sendto(_con(mid), ("127.0.0.1", node.coap_port))
                await eventually(lambda: node.lwm2m.metrics().get("coap_rate_limited", 0) == 2)
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as http:
                async with http.get("/metrics") as r:
                    text = await r.text()
        limited = {
            (s.labels["listener"], s.labels["cause"]): s.value
            for family in text_string_to_metric_families(text)
            if family.name == "devicehub_coap_rate_limited"
            for s in family.samples
            if s.name.endswith("_total")
        }
        assert limited == {
            ("coap", "address"): 2,
            ("coap", "host"): 0,
            ("coap_tcp", "address"): 0,
            ("coap_tcp", "host"): 3,
        }

    run(scenario())


def test_dtls_sessions_of_one_host_share_its_allowance(tmp_path: Path) -> None:
    """Over DTLS each session's source port is an address of its own: two devices of one host (burst 4, two of it
    spent on their Registers) get two more requests answered between them, and the rest is dropped as the host's."""

    async def scenario() -> None:
        clock = ManualClock()  # nothing refills
        async with running_node(
            tmp_path,
            clock=clock,
            dev=False,
            allow_nosec=False,
            coaps_port=free_udp_port(),
            coap_host_rate_limit=1.0,
            coap_host_rate_burst=4.0,
        ) as node:
            assert node.coaps_port is not None
            server = ("127.0.0.1", node.coaps_port)
            account = (await node.accounts.create_account("tenant")).id
            sims = []
            for n in range(2):
                name, key = f"host-limit-device-{n:02}", bytes([n]) * 16
                await node.credentials.add_psk(account, name, key.hex())
                security = ClientCredentials(psk_identity=name, psk_key=key)
                sims.append(SimDevice(SystemClock(), server, name, flavor=OMA, security=security))
            asks: list[asyncio.Future[CoapMessage]] = []
            try:
                for sim in sims:
                    await sim.start()
                    await asyncio.wait_for(sim.registered.wait(), 10)
                for sim in sims:
                    for _ in range(3):
                        ask = sim.endpoint.request(server, codes.GET, [(codes.URI_PATH, b"nothing")])
                        asks.append(asyncio.ensure_future(ask))
                await eventually(lambda: node.lwm2m.metrics().get("coaps_host_rate_limited", 0) >= 4)
                await eventually(lambda: sum(ask.done() for ask in asks) == 2)
                assert node.lwm2m.metrics()["coaps_rate_limited"] == 0
            finally:
                for ask in asks:
                    ask.cancel()
                await asyncio.gather(*asks, return_exceptions=True)
                for sim in sims:
                    await sim.stop(deregister=False)  # a De-register would be dropped too, and retransmitted for long

    run(scenario())
