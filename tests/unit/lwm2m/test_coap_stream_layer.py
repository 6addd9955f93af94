"""CoAP over TCP at the token layer (RFC 8323): with a fake stream carrier under a `CoapEndpoint`, messages go and
come as they are — no message IDs, no ACKs, no retransmission, no de-duplication."""

from __future__ import annotations

import asyncio

import pytest

from devicehub._core import CoapMessage
from devicehub.clock import ManualClock
from devicehub.domain.device_results import DeviceReset
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Options, Reply
from devicehub.lwm2m.coap.stream import StreamLayer
from devicehub.lwm2m.tcp import Frame, decode_message, options_body

PEER: Address = ("192.0.2.1", 40000)


class FakeCarrier:
    """Connections that record each message written; `open` says which peers have one."""

    def __init__(self) -> None:
        self.sent: list[tuple[Address, int, bytes, Options, bytes]] = []
        self.open = {PEER}
        self.closed = False

    def send_message(self, remote: Address, code: int, token: bytes, options: Options, payload: bytes) -> bool:
        if remote not in self.open:
            return False
        self.sent.append((remote, code, token, options, payload))
        return True

    def close(self) -> None:
        self.closed = True


def frame(code: int, token: bytes, options: Options, payload: bytes = b"") -> CoapMessage:
    return decode_message(Frame(code, token, options_body(options, payload)))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def stream_endpoint(clock: ManualClock, handled: list[bytes]) -> tuple[CoapEndpoint, FakeCarrier, StreamLayer]:
    async def on_request(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        handled.append(payload)
        return Reply(codes.CHANGED)

    endpoint = CoapEndpoint(clock, on_request, ack_timeout=1.0)
    carrier = FakeCarrier()
    return endpoint, carrier, endpoint.carry_over(carrier)


def test_a_request_goes_out_once_and_its_response_is_matched_by_token() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        endpoint, carrier, stream = stream_endpoint(clock, [])
        pending = asyncio.ensure_future(endpoint.request(PEER, codes.GET, [(codes.URI_PATH, b"3")]))
        await settle()
        await clock.advance(60.0)  # no ACK over a stream: nothing is retransmitted
        ((remote, code, token, _, _),) = carrier.sent
        assert (remote, code) == (PEER, codes.GET)
        stream.message_received(frame(codes.CONTENT, token, [], b"v"), PEER)
        assert (await pending).payload == b"v"
        assert endpoint.stats.retransmissions == 0

    asyncio.run(scenario())


def test_every_request_frame_is_handled_and_answered_with_its_token() -> None:
    async def scenario() -> None:
        handled: list[bytes] = []
        _, carrier, stream = stream_endpoint(ManualClock(), handled)
        request = frame(codes.POST, b"tk", [(codes.URI_PATH, b"rd")], b"x")
        stream.message_received(request, PEER)
        stream.message_received(request, PEER)  # no message IDs: the same bytes are a second request
        await settle()
        assert handled == [b"x", b"x"]
        assert [(code, token) for _, code, token, _, _ in carrier.sent] == [(codes.CHANGED, b"tk")] * 2

    asyncio.run(scenario())


def test_a_request_with_an_unknown_critical_option_is_answered_4_02() -> None:
    async def scenario() -> None:
        handled: list[bytes] = []
        _, carrier, stream = stream_endpoint(ManualClock(), handled)
        stream.message_received(frame(codes.GET, b"t", [(9, b"")]), PEER)
        await settle()
        assert handled == [] and [code for _, code, _, _, _ in carrier.sent] == [codes.BAD_OPTION]

    asyncio.run(scenario())


def test_a_request_to_a_peer_without_a_connection_fails_at_once() -> None:
    async def scenario() -> None:
        endpoint, _, _ = stream_endpoint(ManualClock(), [])
        with pytest.raises(DeviceReset):
            await endpoint.request(("192.0.2.9", 1), codes.GET, [])

    asyncio.run(scenario())


def test_a_response_for_an_unknown_token_is_offered_as_a_notification_and_needs_no_reset() -> None:
    async def scenario() -> None:
        seen: list[bytes] = []

        def on_notification(message: CoapMessage, remote: Address) -> bool:
            seen.append(message.token)
            return False

        async def nothing(message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
            return None

        endpoint = CoapEndpoint(ManualClock(), nothing, on_notification)
        carrier = FakeCarrier()
        endpoint.carry_over(carrier).message_received(frame(codes.CONTENT, b"??", [(codes.OBSERVE, b"\x01")]), PEER)
        assert seen == [b"??"] and carrier.sent == [] and endpoint.stats.unknown_notifications == 1

    asyncio.run(scenario())
