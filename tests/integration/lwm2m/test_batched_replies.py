"""The ACK/RST of the notifications one loop turn brings go out together (issue 15 #2: one sendmmsg on Linux),
each still the empty ACK or RST of its own message ID, over real UDP."""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest

from devicehub._core import CoapMessage, coap_decode, coap_encode, coap_encode_uint, udp_send_batch
from devicehub.clock import SystemClock
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from support.loops import LoopKind, run_on

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="sendmmsg is Linux's")
KNOWN = b"\x01known\x02"
UNKNOWN = b"\x09nobody"
BURST = 120


def _notification(mid: int, token: bytes, seq: int) -> bytes:
    options = [(codes.OBSERVE, coap_encode_uint(seq)), (codes.CONTENT_FORMAT, b"")]
    return coap_encode(codes.CON, codes.CONTENT, mid, token, options, str(seq).encode())


async def _receive(sock: socket.socket, count: int) -> list[CoapMessage]:
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


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_burst_of_con_notifications_gets_every_ack_with_its_message_id(loop: LoopKind) -> None:
    """120 CON notifications sent at once (within a default receive buffer), two tokens, one observed: every one
    is answered exactly once, the observed token's with an empty ACK and the other's with RST (RFC 7252 §4.2,
    §5.2.2: empty messages, no token), each carrying its notification's message ID; the handler saw each
    notification with its token. uvloop (as `serve` runs) reads many datagrams per loop turn, so their replies
    share sendmmsg calls; the stdlib loop reads one per turn, so each reply goes out alone by sendto."""

    async def scenario() -> None:
        seen: list[tuple[int, bytes]] = []

        def on_notification(message: CoapMessage, remote: Address) -> bool:
            seen.append((message.mid, message.token))
            return message.token == KNOWN

        async def refuse(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
            return Reply(codes.NOT_FOUND)

        server = await CoapEndpoint.bind("127.0.0.1", 0, SystemClock(), refuse, on_notification)
        device = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        device.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        device.bind(("127.0.0.1", 0))
        device.setblocking(False)
        try:
            sent = {}
            for n in range(BURST):
                mid, token = (0xFFF0 + n) & 0xFFFF, KNOWN if n % 3 else UNKNOWN  # message IDs wrap past 0xFFFF
                sent[mid] = token
                device.sendto(_notification(mid, token, n), server.address)
            replies = await _receive(device, BURST)
            assert sorted(seen) == sorted(sent.items())
            assert sorted(r.mid for r in replies) == sorted(sent)  # every one, once
            for reply in replies:
                expected = codes.ACK if sent[reply.mid] == KNOWN else codes.RST
                assert (reply.mtype, reply.code, reply.token, reply.payload) == (expected, codes.EMPTY, b"", b"")
            assert server.stats.sent == BURST
            if loop == "uvloop" and sys.platform == "linux":
                assert server.stats.sent_in_batches > 0
            # a retransmission gets the same reply again (the de-dup cache holds the batched reply)
            mid = next(m for m, t in sent.items() if t == KNOWN)
            device.sendto(_notification(mid, KNOWN, 1), server.address)
            (again,) = await _receive(device, 1)
            assert (again.mtype, again.mid) == (codes.ACK, mid)
            assert server.stats.duplicates == 1
        finally:
            device.close()
            await server.close()

    run_on(loop, asyncio.wait_for(scenario(), 30))


@linux_only
def test_udp_send_batch_sends_each_payload_to_its_own_destination() -> None:
    a, b, c = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(3))
    try:
        for s in (a, b, c):
            s.bind(("127.0.0.1", 0))
        b.settimeout(5)
        c.settimeout(5)
        to_b, to_c = b.getsockname(), c.getsockname()
        batch = [(bytes([0x60, 0, n >> 8, n & 0xFF]), to_b if n % 2 else to_c) for n in range(100)]
        assert udp_send_batch(a.fileno(), batch) == 100
        for receiver, first in ((b, 1), (c, 0)):
            for n in range(first, 100, 2):  # each destination gets its own, in order
                assert receiver.recvfrom(16) == (batch[n][0], a.getsockname())
        assert udp_send_batch(a.fileno(), []) == 0
    finally:
        for s in (a, b, c):
            s.close()


@linux_only
def test_udp_send_batch_refuses_a_host_name_before_sending_any() -> None:
    a, b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        b.setblocking(False)
        with pytest.raises(ValueError, match="not an IP address"):
            udp_send_batch(a.fileno(), [(b"x", b.getsockname()), (b"y", ("localhost", 9))])
        with pytest.raises(BlockingIOError):
            b.recv(16)
        with pytest.raises(OSError):
            udp_send_batch(-1, [(b"x", b.getsockname())])
    finally:
        a.close()
        b.close()
