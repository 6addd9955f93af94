"""Everything the endpoint sends in one loop turn on a plain UDP socket (answers finished by separate tasks, its own
requests) leaves together at the turn's end (issue 16: one sendmmsg on Linux), each datagram to its own peer, and a
datagram the kernel refuses costs only itself; over real UDP sockets."""

from __future__ import annotations

import asyncio
import socket
import sys

import pytest

from devicehub._core import CoapMessage, coap_decode, coap_encode
from devicehub.clock import SystemClock
from devicehub.domain.device_results import DeviceError
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.udp import open_udp
from support.loops import run_on

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="sendmmsg is Linux's")
PEERS = 8
REFUSED: Address = ("255.255.255.255", 5683)  # broadcast without SO_BROADCAST: sendto/sendmmsg fail (EACCES)


def _peer() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    return sock


async def _answer(sock: socket.socket) -> CoapMessage:
    return coap_decode(await asyncio.get_running_loop().run_in_executor(None, sock.recv, 2048))


@pytest.mark.parametrize("opener", ["open_udp", "bind"])
def test_answers_finished_in_one_turn_leave_together_and_a_refused_datagram_costs_only_itself(opener: str) -> None:
    """Eight requests wait in their handlers (separate tasks) for one event; a task of the endpoint's own waits too,
    to send a request the kernel refuses, queued between the fourth and the fifth answer. Released in one loop turn:
    the first four answers leave in one sendmmsg, the refused request is counted as a send error, the four after it
    still go, and every peer gets its own answer (its message ID, token and path)."""

    async def scenario() -> None:
        release = asyncio.Event()
        entered: list[str] = []
        waiting = asyncio.Event()

        async def on_request(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
            entered.append(message.uri_path)
            waiting.set()
            await release.wait()
            return Reply(codes.CONTENT, payload=message.uri_path.encode())

        if opener == "open_udp":  # the server's plain listener (BatchedUdpTransport)
            server = CoapEndpoint(SystemClock(), on_request)
            await open_udp(server, "127.0.0.1", 0)
        else:  # uvloop's transport, as the simulator's devices have
            server = await CoapEndpoint.bind("127.0.0.1", 0, SystemClock(), on_request)

        async def refused_request() -> None:
            await release.wait()
            await server.request(REFUSED, codes.GET, [(codes.URI_PATH, b"x")])

        async def until_entered(count: int) -> None:
            while len(entered) < count:
                waiting.clear()
                await waiting.wait()

        peers = [_peer() for _ in range(PEERS)]
        refused: asyncio.Task[None] | None = None
        try:
            for n, peer in enumerate(peers):
                if n == PEERS // 2:
                    await until_entered(n)
                    refused = asyncio.ensure_future(refused_request())
                    await asyncio.sleep(0)  # it waits on the event before the later handlers do
                request = coap_encode(codes.CON, codes.GET, 100 + n, bytes([n]), [(codes.URI_PATH, f"p{n}".encode())])
                peer.sendto(request, server.address)
            await until_entered(PEERS)
            release.set()
            answers = await asyncio.gather(*(_answer(peer) for peer in peers))
            for n, answer in enumerate(answers):
                assert (answer.mtype, answer.code, answer.mid) == (codes.ACK, codes.CONTENT, 100 + n)
                assert (answer.token, answer.payload) == (bytes([n]), f"/p{n}".encode())
            assert server.stats.send_errors == 1
            assert server.stats.sent_in_batches == PEERS // 2  # sendmmsg stops at the refused one; the rest by sendto
            assert server.stats.sent == PEERS + 1
        finally:
            if refused is not None:
                refused.cancel()
                with pytest.raises((asyncio.CancelledError, DeviceError)):
                    await refused
            for peer in peers:
                peer.close()
            await server.close()

    run_on("uvloop", asyncio.wait_for(scenario(), 30))
