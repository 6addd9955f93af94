"""A Register shed on the receive path (issue 30 #4): while the registration backlog is full a Register is answered
5.03 with a Max-Age before its query and links are parsed and before a task is made for it; other requests, and
Registers while there is room, take the handler's path."""

from __future__ import annotations

import asyncio

from devicehub._core import CoapMessage, coap_decode, coap_encode
from devicehub.clock import ManualClock
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from support.coap_fakes import FakeDatagramTransport
from support.lwm2m_parts import Parts, register_message, update_message

PEER: Address = ("192.0.2.1", 5683)


def test_a_request_the_owner_sheds_is_answered_at_once_without_a_task_or_its_handler() -> None:
    async def scenario() -> None:
        handled: list[str] = []

        async def on_request(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
            handled.append(message.uri_path)
            return Reply(codes.CREATED)

        def shed(message: CoapMessage) -> Reply | None:
            return Reply(codes.SERVICE_UNAVAILABLE) if message.uri_path == "/rd" else None

        coap = CoapEndpoint(ManualClock(), on_request, shed=shed)
        transport = FakeDatagramTransport()
        coap.connection_made(transport)
        tasks_before = len(asyncio.all_tasks())
        coap.datagram_received(coap_encode(codes.CON, codes.POST, 7, b"t", [(codes.URI_PATH, b"rd")], b"</1/0>"), PEER)
        assert len(asyncio.all_tasks()) == tasks_before and handled == []
        [answer] = transport.messages()
        assert (answer.mtype, answer.code, answer.mid) == (codes.ACK, codes.SERVICE_UNAVAILABLE, 7)
        coap.datagram_received(coap_encode(codes.CON, codes.POST, 7, b"t", [(codes.URI_PATH, b"rd")], b"</1/0>"), PEER)
        assert transport.sent[1] == transport.sent[0]  # its retransmission: the same answer (RFC 7252 §4.5)

    asyncio.run(scenario())


def test_the_handler_sheds_a_register_early_only_while_the_backlog_is_full() -> None:
    async def main() -> None:
        parts = Parts(max_backlog=1)
        message, payload = register_message("ep=a")
        assert parts.handler.shed_early(message) is None  # room: the handler's path
        assert (await parts.handler.register(message, payload, PEER)).code == codes.CREATED
        shed = parts.handler.shed_early(register_message("ep=b")[0])
        assert shed is not None and shed.code == codes.SERVICE_UNAVAILABLE
        assert [number for number, _ in shed.options] == [codes.MAX_AGE]
        assert parts.stats.registrations_shed == 1
        update, _ = update_message("rd/acc-1/dev-a")
        assert parts.handler.shed_early(update) is None  # Updates are never shed here
        malformed = coap_decode(coap_encode(codes.CON, codes.POST, 1, b"t", [(codes.URI_PATH, b"rd")], b""))
        assert parts.handler.shed_early(malformed) is not None  # not even its query is read
        await parts.writer.flush()
        assert parts.handler.shed_early(register_message("ep=c")[0]) is None

    asyncio.run(main())
