"""The plain UDP listener reads by recvmmsg (issue 15 #2): what one loop turn finds waiting reaches the endpoint as
one batch, each datagram handled and answered as before, over real UDP sockets."""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
from collections.abc import Awaitable, Callable

import pytest

from devicehub._core import (
    CoapMessage,
    ObserveLane,
    ObserveOrder,
    UdpReceiver,
    coap_decode,
    coap_encode,
    coap_encode_uint,
)
from devicehub.clock import SystemClock
from devicehub.lwm2m import codes, udp
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.udp import open_udp
from support.loops import LoopKind, run_on
from support.receive_buffer import holds_burst, rmem_max
from support.waiting import eventually

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="recvmmsg is Linux's")
IP_RECVERR = 11  # linux/in.h; the socket module does not name it
KNOWN = b"\x01known\x02"
BROKEN = b"\x0bbroken"  # the notification handler raises for this token


class Recording(CoapEndpoint):
    """An endpoint that records the batches it is handed and the socket errors reported to it."""

    batches: list[list[tuple[bytes, Address]]]
    errors: list[Exception]
    errored: asyncio.Event

    def datagrams_received(self, batch: list[tuple[bytes, Address]]) -> None:
        self.batches.append(list(batch))
        super().datagrams_received(batch)

    def error_received(self, exc: Exception) -> None:
        self.errors.append(exc)
        self.errored.set()
        super().error_received(exc)


async def _listen(batch: int) -> Recording:
    def on_notification(message: CoapMessage, remote: Address) -> bool:
        if message.token == BROKEN:
            raise RuntimeError("handler bug")
        return message.token == KNOWN

    async def on_request(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        return Reply(codes.CONTENT, payload=message.uri_path.encode())

    endpoint = Recording(SystemClock(), on_request, on_notification)
    endpoint.batches, endpoint.errors, endpoint.errored = [], [], asyncio.Event()
    await open_udp(endpoint, "127.0.0.1", 0, batch=batch)
    return endpoint


def _peer() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


def _notification(mid: int, token: bytes) -> bytes:
    options = [(codes.OBSERVE, coap_encode_uint(mid)), (codes.CONTENT_FORMAT, b"")]
    return coap_encode(codes.CON, codes.CONTENT, mid, token, options, b"21.5")


def _get(mid: int, path: str) -> bytes:
    return coap_encode(codes.CON, codes.GET, mid, b"\x07", [(codes.URI_PATH, path.encode())], b"")


async def _replies(sock: socket.socket, count: int) -> list[CoapMessage]:
    """`count` datagrams from a non-blocking socket, as the loop reports them readable."""
    loop = asyncio.get_running_loop()
    got: list[CoapMessage] = []
    readable = asyncio.Event()
    loop.add_reader(sock.fileno(), readable.set)
    try:
        while len(got) < count:
            await readable.wait()
            readable.clear()
            while True:
                try:
                    got.append(coap_decode(sock.recv(2048)))
                except BlockingIOError:
                    break
    finally:
        loop.remove_reader(sock.fileno())
    return got


def _run(loop: LoopKind, scenario: Callable[[], Awaitable[None]]) -> None:
    run_on(loop, asyncio.wait_for(scenario(), 30))


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_batch_from_several_peers_is_each_handled_and_answered(loop: LoopKind) -> None:
    """Five peers send 8 datagrams each (CON notifications and CON GETs) before the loop looks: the reader hands
    them over in batches of at most 16 (40 waiting: three turns), one of which holds several peers; every
    notification gets its empty ACK, every GET its piggy-backed 2.05, each to the peer that sent it."""

    async def scenario() -> None:
        endpoint = await _listen(batch=16)
        peers = [_peer() for _ in range(5)]
        try:
            for n, peer in enumerate(peers):
                for i in range(8):
                    mid = n * 100 + i
                    peer.sendto(_notification(mid, KNOWN) if i % 2 else _get(mid, f"p{n}"), endpoint.address)
            answers = await asyncio.gather(*(_replies(peer, 8) for peer in peers))
            for n, replies in enumerate(answers):
                assert sorted(r.mid for r in replies) == [n * 100 + i for i in range(8)]
                for reply in replies:
                    assert reply.mtype == codes.ACK
                    if reply.mid % 2:
                        assert (reply.code, reply.token, reply.payload) == (codes.EMPTY, b"", b"")
                    else:
                        assert (reply.code, reply.token, reply.payload) == (codes.CONTENT, b"\x07", f"/p{n}".encode())
            sizes = [len(b) for b in endpoint.batches]
            assert sum(sizes) == 40 and max(sizes) == 16  # loopback delivers at once: 16, 16, 8
            assert len({addr for _, addr in endpoint.batches[0]}) >= 2
            assert endpoint.stats.received == 40
            assert endpoint.stats.sent_in_batches >= 16  # the ACKs of a batch left in one sendmmsg
        finally:
            for peer in peers:
                peer.close()
            await endpoint.close()

    _run(loop, scenario)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_malformed_datagram_in_the_middle_of_a_batch_costs_only_itself(loop: LoopKind) -> None:
    """One batch: a notification, a 1-byte datagram, a CON whose options run past its end, a notification whose
    handler raises, a GET. The two malformed ones are counted and dropped (the CON one answered RST, RFC 7252
    §4.2), the handler's failure is logged, and the datagrams after them are answered all the same."""

    async def scenario() -> None:
        endpoint = await _listen(batch=64)
        peer = _peer()
        try:
            peer.sendto(_notification(1, KNOWN), endpoint.address)
            peer.sendto(b"\x40", endpoint.address)
            peer.sendto(bytes([0x40, 0x01, 0x00, 0x03, 0xB5, 0x61]), endpoint.address)  # option longer than data
            peer.sendto(_notification(4, BROKEN), endpoint.address)
            peer.sendto(_get(5, "after"), endpoint.address)
            replies = {r.mid: r for r in await _replies(peer, 3)}
            assert [len(b) for b in endpoint.batches] == [5]
            assert sorted(replies) == [1, 3, 5]
            assert (replies[1].mtype, replies[1].code) == (codes.ACK, codes.EMPTY)
            assert (replies[3].mtype, replies[3].code) == (codes.RST, codes.EMPTY)
            assert (replies[5].mtype, replies[5].code, replies[5].payload) == (codes.ACK, codes.CONTENT, b"/after")
            assert endpoint.stats.malformed == 2
            assert endpoint.stats.received == 5
        finally:
            peer.close()
            await endpoint.close()

    _run(loop, scenario)


@pytest.mark.parametrize(("loop", "recverr"), [("uvloop", False), ("asyncio", False), ("asyncio", True)])
def test_an_icmp_error_does_not_stop_the_reader(loop: LoopKind, recverr: bool) -> None:
    """The endpoint sends to a closed port and the kernel answers ICMP port unreachable, three times. As `serve`
    runs (uvloop, no IP_RECVERR) Linux does not report it on an unconnected socket; with IP_RECVERR set (stdlib
    loop: libuv would stop a poll handle that reports POLLERR, which is why the listener never sets it) recvmmsg
    fails once with ECONNREFUSED, counted as a send error, and the error queue is emptied. Either way the reader
    goes on: the peer's notification after each is answered."""

    async def scenario() -> None:
        endpoint = await _listen(batch=64)
        server_socket = endpoint.datagram_socket
        assert server_socket is not None
        if recverr:
            server_socket.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        closed = _peer()
        nobody = closed.getsockname()
        closed.close()
        peer = _peer()
        try:
            for round_ in range(3):
                endpoint.send_datagram(coap_encode(codes.NON, codes.GET, round_, b"", [], b""), nobody)
                if recverr:
                    await endpoint.errored.wait()
                    endpoint.errored.clear()
                peer.sendto(_notification(round_, KNOWN), endpoint.address)
                (reply,) = await _replies(peer, 1)
                assert (reply.mtype, reply.mid) == (codes.ACK, round_)
            expected = [errno.ECONNREFUSED] * 3 if recverr else []
            assert [getattr(e, "errno", None) for e in endpoint.errors] == expected
            assert endpoint.stats.send_errors == len(expected)
        finally:
            peer.close()
            await endpoint.close()

    _run(loop, scenario)


def test_udp_receiver_bounds_and_cuts() -> None:
    """At most `capacity` datagrams a call, the rest left for the next; a datagram longer than the buffer is cut
    to it (one byte above the endpoint's limit, so the endpoint sees it is too long); nothing waiting: empty."""
    receiver = UdpReceiver(2, 8)
    a, b = _peer(), _peer()
    try:
        for payload in (b"one", b"two", b"three-is-long"):
            a.sendto(payload, b.getsockname())
        assert receiver.capacity == 2
        first = receiver.receive(b.fileno())  # loopback delivers at once: all three are waiting
        second = receiver.receive(b.fileno())
        assert first == [(b"one", a.getsockname()), (b"two", a.getsockname())]
        assert second == [(b"three-is", a.getsockname())]
        assert first[0][1] is first[1][1] is second[0][1]  # one address object per peer
        assert receiver.receive(b.fileno()) == []
        with pytest.raises(ValueError):
            UdpReceiver(0, 8)
        with pytest.raises(OSError):
            receiver.receive(-1)
    finally:
        a.close()
        b.close()


BURST = 600  # 1 KiB datagrams: ~1.4 MiB of kernel buffer, where the default 208 KiB holds about 90 of them


@holds_burst(2 * BURST * 1024)
def test_a_burst_that_arrives_while_the_loop_is_busy_waits_in_the_socket_instead_of_being_dropped() -> None:
    """Issue 16: a registration storm offered at 10 000/s overflowed the default receive buffer whenever a loop turn
    ran long (37 000 drops in a 20 000-device storm, each a device waiting out its retransmission): the listener asks
    for RECEIVE_BUFFER. The burst here is sent while the loop cannot read (the test holds it), then all of it is
    read."""

    async def scenario() -> None:
        endpoint = await _listen(batch=64)
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            address = endpoint.address
            for mid in range(BURST):  # no await: the loop reads none of them meanwhile
                peer.sendto(coap_encode(codes.NON, codes.CONTENT, mid, KNOWN, [], bytes(1024)), address)
            await eventually(lambda: sum(len(batch) for batch in endpoint.batches) == BURST, within=10)
        finally:
            peer.close()
            await endpoint.close()

    _run("uvloop", scenario)


@pytest.mark.parametrize("batched", [True, False])
def test_the_listener_asks_for_the_wide_receive_buffer_with_and_without_batched_reads(
    batched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where recvmmsg is missing the listener is the loop's own datagram transport; it asks for RECEIVE_BUFFER all
    the same (Linux reports twice what was granted, capped at net.core.rmem_max)."""
    monkeypatch.setattr(udp, "RECV_BATCHES", batched)

    async def scenario() -> None:
        endpoint = await _listen(batch=16)
        try:
            sock = endpoint.datagram_socket
            assert sock is not None
            granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            assert granted >= 2 * min(udp.RECEIVE_BUFFER, rmem_max())
        finally:
            await endpoint.close()

    _run("uvloop", scenario)


def test_the_lanes_ack_of_a_con_notification_goes_to_the_address_its_observation_was_armed_at() -> None:
    """Issue 30 #2: the receive call made a `(host, port)` tuple for each ACK it returned once the peers outnumbered
    its address cache (4 096), so a fleet of CON notifiers paid a string and a tuple per notification. The armed
    observation keeps the tuple it was armed with, and its ACKs are addressed to that object; a retransmission's
    ACK (acknowledged again after the observation was disarmed) still goes to the datagram's own address."""
    receiver = UdpReceiver(4, 1153)
    device, server = _peer(), _peer()
    token = b"\x07\x01"
    armed_at = (device.getsockname()[0], device.getsockname()[1])  # a tuple of the test's, not the receiver's
    lane = ObserveLane(16, 247.0, 1152)
    try:
        assert lane.arm("dev-1", armed_at, token, "/3303/0/5700", ObserveOrder())
        options = [(codes.OBSERVE, coap_encode_uint(5)), (codes.CONTENT_FORMAT, b"")]
        datagram = coap_encode(codes.CON, codes.CONTENT, 0x4242, token, options, b"21.5")
        device.sendto(datagram, server.getsockname())
        others, values, acks, counts = receiver.receive_sifting(server.fileno(), lane, 1.0)
        assert (others, values, counts) == ([], [("dev-1", "/3303/0/5700", 0, b"21.5", 5)], (1, 0, 0))
        assert acks == [(coap_encode(codes.ACK, 0, 0x4242, b"", [], b""), armed_at)]
        assert acks[0][1] is armed_at
        lane.clear()
        device.sendto(datagram, server.getsockname())
        others, values, acks, counts = receiver.receive_sifting(server.fileno(), lane, 2.0)
        assert (others, values, counts) == ([], [], (1, 1, 0))
        assert acks[0][1] == device.getsockname() and acks[0][1] is not armed_at
    finally:
        device.close()
        server.close()
