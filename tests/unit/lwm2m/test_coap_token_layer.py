"""The exchange (token) layer over a fake layer below: responses matched by token and peer, unknown tokens refused."""

from __future__ import annotations

import asyncio

import pytest

from devicehub._core import CoapMessage, coap_decode, coap_encode
from devicehub.clock import ManualClock
from devicehub.domain.device_results import DeviceProtocolError, DeviceTimeout, EndpointClosed
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.exchanges import PendingExchange
from devicehub.lwm2m.coap.messages import Address, Options, Stats
from devicehub.lwm2m.coap.requester import Requester

PEER: Address = ("192.0.2.1", 5683)
OTHER: Address = ("192.0.2.2", 5683)


class FakeBelow:
    """A reliable layer below (as TCP is): each message delivered at once, none waited for."""

    def __init__(self) -> None:
        self.sent: list[tuple[PendingExchange, int, Options]] = []
        self.released: list[PendingExchange] = []

    async def transmit(
        self, exchange: PendingExchange, code: int, options: Options, payload: bytes, timing: tuple[float, int] | None
    ) -> None:
        self.sent.append((exchange, code, options))

    def release(self, exchange: PendingExchange) -> None:
        self.released.append(exchange)


def response(token: bytes, payload: bytes = b"v") -> CoapMessage:
    return coap_decode(coap_encode(codes.NON, codes.CONTENT, 0, token, [], payload))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def requester(clock: ManualClock, below: FakeBelow) -> Requester:
    return Requester(clock, Stats(), below, szx=6, response_timeout=10.0)


def test_a_response_is_matched_by_token_and_peer() -> None:
    async def scenario() -> None:
        below = FakeBelow()
        tokens = requester(ManualClock(), below)
        first = asyncio.ensure_future(tokens.request(PEER, codes.GET, []))
        second = asyncio.ensure_future(tokens.request(PEER, codes.GET, []))
        await settle()
        (one, _, _), (two, _, _) = below.sent
        assert one.token != two.token
        assert not tokens.settle(response(two.token), OTHER)  # the right token from another peer is no answer
        assert tokens.settle(response(two.token, b"2"), PEER) and tokens.settle(response(one.token, b"1"), PEER)
        assert ((await first).payload, (await second).payload) == (b"1", b"2")
        assert {id(e) for e in below.released} == {id(one), id(two)} and tokens.by_token == {}

    asyncio.run(scenario())


def test_a_response_for_an_unknown_token_is_left_to_the_caller() -> None:
    tokens = requester(ManualClock(), FakeBelow())
    assert not tokens.settle(response(b"unknown"), PEER)


def test_a_response_that_cannot_be_understood_fails_its_exchange() -> None:
    async def scenario() -> None:
        below = FakeBelow()
        tokens = requester(ManualClock(), below)
        pending = asyncio.ensure_future(tokens.request(PEER, codes.GET, []))
        await settle()
        token = below.sent[0][0].token
        assert tokens.settle(response(token), PEER, DeviceProtocolError("bad option"))
        with pytest.raises(DeviceProtocolError):
            await pending

    asyncio.run(scenario())


def test_no_response_within_the_response_timeout_is_a_device_timeout() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        below = FakeBelow()
        tokens = requester(clock, below)
        pending = asyncio.ensure_future(tokens.request(PEER, codes.GET, []))
        await settle()
        await clock.advance(10.0)
        with pytest.raises(DeviceTimeout):
            await pending
        assert tokens.by_token == {}

    asyncio.run(scenario())


def test_closing_fails_every_waiting_exchange() -> None:
    async def scenario() -> None:
        tokens = requester(ManualClock(), FakeBelow())
        pending = asyncio.ensure_future(tokens.request(PEER, codes.GET, []))
        await settle()
        tokens.close()
        with pytest.raises(EndpointClosed):
            await pending

    asyncio.run(scenario())
