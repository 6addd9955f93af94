"""A confirmable request's wait for its ACK (RFC 7252 §4.2), on the injected clock's timers, over real UDP."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from devicehub._core import CoapMessage, coap_decode, coap_encode
from devicehub.clock import ManualClock
from devicehub.domain.device_results import DeviceTimeout
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.coap.parameters import ACK_RANDOM_FACTOR, ACK_TIMEOUT, MAX_TRANSMIT_WAIT
from support.node import run
from support.waiting import eventually

GET_TEMPERATURE = [(codes.URI_PATH, b"3303"), (codes.URI_PATH, b"0"), (codes.URI_PATH, b"5700")]


async def _refuse(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
    return Reply(codes.NOT_FOUND)


async def _received(peer: socket.socket) -> CoapMessage:
    return coap_decode(await asyncio.get_running_loop().sock_recv(peer, 2048))


def _nothing_waiting(peer: socket.socket) -> bool:
    try:
        peer.recv(2048)
    except BlockingIOError:
        return True
    return False


@contextlib.asynccontextmanager
async def _getting(peer: socket.socket) -> AsyncIterator[tuple[ManualClock, CoapEndpoint, asyncio.Task[Any]]]:
    """An endpoint on a manual clock with a confirmable GET under way to `peer`; closed afterwards."""
    clock = ManualClock()
    server = await CoapEndpoint.bind("127.0.0.1", 0, clock, _refuse)
    try:
        yield clock, server, asyncio.create_task(server.request(peer.getsockname(), codes.GET, GET_TEMPERATURE))
    finally:
        await server.close()


async def _acked(peer: socket.socket, server: CoapEndpoint) -> CoapMessage:
    """The request as the peer received it, answered with an empty ACK (a separate response will follow)."""
    sent = await _received(peer)
    peer.sendto(coap_encode(codes.ACK, codes.EMPTY, sent.mid, b"", [], b""), server.address)
    return sent


@pytest.fixture
def peer() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    yield sock
    sock.close()


def test_an_unacknowledged_request_goes_again_with_its_message_id_once_the_ack_timeout_passes(
    peer: socket.socket,
) -> None:
    """The device stays silent: nothing is resent before ACK_TIMEOUT, the same message once the randomised timeout
    has passed (at most ACK_TIMEOUT × ACK_RANDOM_FACTOR); its piggy-backed answer then ends the request, and no
    timer is left on the clock."""

    async def scenario() -> None:
        async with _getting(peer) as (clock, server, request):
            first = await _received(peer)
            await clock.advance(ACK_TIMEOUT * 0.99)
            assert _nothing_waiting(peer)
            await clock.advance(ACK_TIMEOUT * (ACK_RANDOM_FACTOR - 0.99) + 0.01)
            again = await _received(peer)
            assert (again.mtype, again.mid, again.token) == (codes.CON, first.mid, first.token)
            peer.sendto(coap_encode(codes.ACK, codes.CONTENT, first.mid, first.token, [], b"21.5"), server.address)
            answer = await request
            assert (answer.code, answer.payload) == (codes.CONTENT, b"21.5")
            assert server.stats.retransmissions == 1 and clock.sleepers == 0

    run(scenario())


def test_an_empty_ack_stops_the_retransmissions_and_the_separate_response_ends_the_request(
    peer: socket.socket,
) -> None:
    """RFC 7252 §5.2.2: after the device's empty ACK nothing is resent however long the answer takes (within the
    response time-out); the answer comes later as a CON of its own, which is ACKed, and ends the request."""

    async def scenario() -> None:
        async with _getting(peer) as (clock, server, request):
            sent = await _acked(peer, server)
            await clock.advance(ACK_TIMEOUT * ACK_RANDOM_FACTOR * 4)  # past every retransmission of the window
            assert _nothing_waiting(peer) and not request.done()
            peer.sendto(coap_encode(codes.CON, codes.CONTENT, 7, sent.token, [], b"22.0"), server.address)
            answer = await request
            assert (answer.code, answer.payload) == (codes.CONTENT, b"22.0")
            ack = await _received(peer)
            assert (ack.mtype, ack.mid) == (codes.ACK, 7)
            assert server.stats.retransmissions == 0

    run(scenario())


def test_a_separate_response_that_never_comes_times_out_at_the_response_time_out_and_leaves_no_timer(
    peer: socket.socket,
) -> None:
    """After the device's empty ACK the request waits MAX_TRANSMIT_WAIT (RFC 7252 §4.8.2) for the separate
    response: still waiting just before it, DeviceTimeout once it has passed, and nothing left on the clock."""

    async def scenario() -> None:
        async with _getting(peer) as (clock, server, request):
            await _acked(peer, server)
            # the ACK has arrived once the only timer left is the response's, MAX_TRANSMIT_WAIT from now
            await eventually(lambda: clock.next_deadline() == clock.now() + MAX_TRANSMIT_WAIT)
            await clock.advance(MAX_TRANSMIT_WAIT * 0.99)
            assert not request.done()
            await clock.advance(MAX_TRANSMIT_WAIT * 0.02)
            with pytest.raises(DeviceTimeout):
                await request
            assert server.stats.timeouts == 1 and clock.sleepers == 0

    run(scenario())
