"""The CoAP message layer over a fake datagram transport and a manual clock: RFC 7252 §4.2 retransmission,
§4.5 de-duplication, RST for what it cannot take, piggy-backed answers."""

from __future__ import annotations

import asyncio

import pytest

from devicehub._core import CoapMessage, coap_encode
from devicehub.clock import ManualClock
from devicehub.domain.device_results import DeviceReset, DeviceTimeout
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.dedup import Deduplicator
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.exchanges import retransmission_timeouts
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.coap.parameters import EXCHANGE_LIFETIME
from support.coap_fakes import FakeDatagramTransport

PEER: Address = ("192.0.2.1", 5683)


def endpoint(
    clock: ManualClock, handled: list[bytes] | None = None, **options: float
) -> tuple[CoapEndpoint, FakeDatagramTransport]:
    async def on_request(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        if handled is not None:
            handled.append(payload)
        return Reply(codes.CONTENT, payload=b"answer")

    coap = CoapEndpoint(clock, on_request, **options)  # type: ignore[arg-type]
    transport = FakeDatagramTransport()
    coap.connection_made(transport)
    return coap, transport


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_retransmission_timeouts_start_within_the_random_factor_and_double() -> None:
    assert retransmission_timeouts(2.0, 4, spread=0.0) == [2.0, 4.0, 8.0, 16.0, 32.0]
    assert retransmission_timeouts(2.0, 4, spread=1.0) == [3.0, 6.0, 12.0, 24.0, 48.0]
    assert all(2.0 <= retransmission_timeouts(2.0, 0)[0] <= 3.0 for _ in range(100))


def test_a_confirmable_request_is_resent_on_the_back_off_schedule_then_times_out() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        coap, transport = endpoint(clock, ack_timeout=1.0, max_retransmit=2)
        request = asyncio.ensure_future(coap.request(PEER, codes.GET, [(codes.URI_PATH, b"3")]))
        await settle()
        assert len(transport.sent) == 1
        await clock.advance(1.5)  # the first timeout is within [1, 1.5]
        assert len(transport.sent) == 2 and transport.sent[1] == transport.sent[0]  # the same message ID
        await clock.advance(3.0)
        assert len(transport.sent) == 3
        await clock.advance(6.0)
        with pytest.raises(DeviceTimeout):
            await request
        assert coap.stats.retransmissions == 2 and coap.stats.timeouts == 1

    asyncio.run(scenario())


def test_a_piggybacked_response_ends_the_exchange_without_retransmission() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        coap, transport = endpoint(clock)
        request = asyncio.ensure_future(coap.request(PEER, codes.GET, []))
        await settle()
        sent = transport.messages()[0]
        coap.datagram_received(coap_encode(codes.ACK, codes.CONTENT, sent.mid, sent.token, [], b"v"), PEER)
        assert (await request).payload == b"v"
        await clock.advance(100.0)
        assert len(transport.sent) == 1

    asyncio.run(scenario())


def test_an_rst_for_a_confirmable_request_fails_it_with_device_reset() -> None:
    async def scenario() -> None:
        coap, transport = endpoint(ManualClock())
        request = asyncio.ensure_future(coap.request(PEER, codes.GET, []))
        await settle()
        coap.datagram_received(coap_encode(codes.RST, 0, transport.messages()[0].mid, b"", [], b""), PEER)
        with pytest.raises(DeviceReset):
            await request

    asyncio.run(scenario())


def test_a_retransmitted_request_is_handled_once_and_answered_with_the_same_bytes() -> None:
    async def scenario() -> None:
        handled: list[bytes] = []
        coap, transport = endpoint(ManualClock(), handled)
        request = coap_encode(codes.CON, codes.POST, 7, b"t", [(codes.URI_PATH, b"rd")], b"x")
        coap.datagram_received(request, PEER)
        await settle()
        coap.datagram_received(request, PEER)
        await settle()
        assert handled == [b"x"] and coap.stats.duplicates == 1
        assert len(transport.sent) == 2 and transport.sent[0] == transport.sent[1]
        answer = transport.messages()[0]
        assert (answer.mtype, answer.mid, answer.token) == (codes.ACK, 7, b"t")

    asyncio.run(scenario())


def test_a_message_id_is_new_again_once_the_exchange_lifetime_passed() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        handled: list[bytes] = []
        coap, _ = endpoint(clock, handled)
        request = coap_encode(codes.CON, codes.POST, 7, b"t", [(codes.URI_PATH, b"rd")], b"x")
        coap.datagram_received(request, PEER)
        await settle()
        clock.jump(EXCHANGE_LIFETIME)
        coap.datagram_received(request, PEER)
        await settle()
        assert handled == [b"x", b"x"]

    asyncio.run(scenario())


def test_the_dedup_window_is_bounded_by_entries_and_reply_bytes_oldest_first() -> None:
    clock = ManualClock()
    seen = Deduplicator(clock, max_entries=2, max_bytes=10)
    assert seen.first(PEER, 1) and seen.first(PEER, 2) and seen.first(PEER, 3)
    assert len(seen) == 2 and seen.first(PEER, 1)  # 1 was dropped: taken as new
    seen.remember(PEER, 3, b"12345678")
    seen.remember(PEER, 1, b"12345678")
    assert seen.bytes == 8 and seen.reply_for(PEER, 1) == b"12345678" and seen.first(PEER, 3)


def test_a_confirmable_response_for_an_unknown_token_is_reset() -> None:
    async def scenario() -> None:
        coap, transport = endpoint(ManualClock())
        coap.datagram_received(coap_encode(codes.CON, codes.CONTENT, 9, b"nope", [], b""), PEER)
        await settle()
        (reset,) = transport.messages()
        assert (reset.mtype, reset.mid, reset.code) == (codes.RST, 9, codes.EMPTY)
        assert coap.stats.unknown_notifications == 1

    asyncio.run(scenario())


def test_a_ping_and_a_malformed_confirmable_message_get_rst() -> None:
    async def scenario() -> None:
        coap, transport = endpoint(ManualClock())
        coap.datagram_received(coap_encode(codes.CON, codes.EMPTY, 5, b"", [], b""), PEER)
        coap.datagram_received(bytes([0x40, codes.GET, 0, 6, 0xFF]), PEER)  # a payload marker with no payload
        await settle()
        assert [(m.mtype, m.mid) for m in transport.messages()] == [(codes.RST, 5), (codes.RST, 6)]
        assert coap.stats.malformed == 1

    asyncio.run(scenario())


def test_a_notification_its_owner_cannot_place_now_gets_no_answer_and_its_retransmission_is_asked_again() -> None:
    """issue 31 #4: neither ACK nor RST while the owner cannot say whether the observation is its (a lookup shed or
    failed): an RST would end the device's observation for good (RFC 7641 §3.6); the CON's retransmission (RFC 7252
    §4.2, same message ID) is taken as new, not as a duplicate of a message already answered."""

    async def scenario() -> None:
        answers: list[bool | None] = [None, True]

        async def place() -> bool | None:
            return answers.pop(0)

        coap = CoapEndpoint(ManualClock(), on_request=None, on_notification=lambda message, remote: place())  # type: ignore[arg-type]
        transport = FakeDatagramTransport()
        coap.connection_made(transport)
        notification = coap_encode(codes.CON, codes.CONTENT, 9, b"tk", [(codes.OBSERVE, b"\x05")], b"21.5")
        coap.datagram_received(notification, PEER)
        await settle()
        assert transport.messages() == [] and coap.stats.unanswered_notifications == 1
        coap.datagram_received(notification, PEER)  # the retransmission
        await settle()
        (ack,) = transport.messages()
        assert (ack.mtype, ack.mid) == (codes.ACK, 9) and coap.stats.duplicates == 0
        assert coap.stats.unknown_notifications == 0

    asyncio.run(scenario())
