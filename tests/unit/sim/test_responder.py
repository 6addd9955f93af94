"""The simulator's responder (sim/responder.py) against the object model: each request the server sends gets the CoAP
code and payload a real client answers (LwM2M 1.1 Core §7 content formats, §5.4 device management), no sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from devicehub._core import CoapMessage, coap_decode, coap_encode, coap_encode_uint, tlv_decode
from devicehub.clock import ManualClock
from devicehub.domain.content_formats import LINK_FORMAT, LWM2M_CBOR, TEXT, TLV
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.messages import Reply
from devicehub.sim.counters import DeviceCounters
from devicehub.sim.objects import (
    BATTERY,
    READ_ONLY,
    TEMPERATURE,
    Value,
    standard_model,
)
from devicehub.sim.observers import Observers
from devicehub.sim.responder import DeviceLog, Reader, Responder

DIMMER = "/3311/0/5851"  # writable, an integer


class Device:
    """A responder over the standard model, its observers sending into a list; writes and executes as SimDevice."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.model = standard_model("responder-1", 300, self.clock.now)
        self.sent: list[tuple[int, bytes, bytes]] = []
        self.registered = asyncio.Event()
        self.registered.set()
        self.log = DeviceLog()
        self.reader = Reader(self.model)
        self.observers = Observers(
            self.clock,
            self.model,
            DeviceCounters(),
            read=self.reader.read,
            send=self._send,
            registered=self.registered,
            confirmable=lambda: False,
        )
        self.responder = Responder(self.reader, self.observers, self.log)
        self.executed: list[str] = []

    async def _send(
        self, code: int, token: bytes, options: list[tuple[int, bytes]], payload: bytes, confirmable: bool
    ) -> None:
        self.sent.append((code, token, payload))

    async def _apply_write(self, values: dict[str, Value]) -> Reply:
        return self.responder.store(values)

    def _execute(self, path: str, payload: bytes) -> Reply:
        return self.responder.execute(path, payload, lambda path, _: self.executed.append(path))

    async def ask(
        self,
        code: int,
        path: str,
        payload: bytes = b"",
        *,
        options: list[tuple[int, bytes]] | None = None,
        token: bytes = b"tk",
    ) -> Reply:
        more = options or []
        request = coap_decode(coap_encode(codes.CON, code, 1, token, [*more, *codes.path_options(path)], payload))
        return await self.responder.answer(request, payload, self._apply_write, self._execute)


def _run(scenario: Callable[[Device], object]) -> None:
    async def main() -> None:
        await scenario(Device())  # type: ignore[misc]

    asyncio.run(main())


def _cf(reply: Reply) -> int | None:
    message: CoapMessage = coap_decode(coap_encode(codes.ACK, reply.code, 1, b"", reply.options, reply.payload))
    return message.content_format


def test_read_of_a_resource_answers_its_text() -> None:
    async def scenario(device: Device) -> None:
        reply = await device.ask(codes.GET, TEMPERATURE)
        assert (reply.code, _cf(reply), reply.payload) == (codes.CONTENT, TEXT, b"21.5")

    _run(scenario)


def test_read_of_an_instance_answers_tlv_by_default_and_cbor_when_asked() -> None:
    async def scenario(device: Device) -> None:
        reply = await device.ask(codes.GET, "/3303/0")
        assert (reply.code, _cf(reply)) == (codes.CONTENT, TLV)
        assert {node.id for node in tlv_decode(reply.payload)} >= {5700, 5701}
        accept = [(codes.ACCEPT, coap_encode_uint(LWM2M_CBOR))]
        cbor = await device.ask(codes.GET, "/3303/0", options=accept)
        assert (cbor.code, _cf(cbor)) == (codes.CONTENT, LWM2M_CBOR)

    _run(scenario)


def test_read_of_a_missing_path_answers_not_found_and_of_security_unauthorized() -> None:
    async def scenario(device: Device) -> None:
        assert (await device.ask(codes.GET, "/3303/7/5700")).code == codes.NOT_FOUND
        assert (await device.ask(codes.GET, "/0/0/0")).code == codes.UNAUTHORIZED

    _run(scenario)


def test_discover_is_not_implemented_and_answers_not_acceptable() -> None:
    async def scenario(device: Device) -> None:
        accept = [(codes.ACCEPT, coap_encode_uint(LINK_FORMAT))]
        assert (await device.ask(codes.GET, "/3303/0", options=accept)).code == codes.NOT_ACCEPTABLE

    _run(scenario)


def test_write_in_text_stores_the_value_and_answers_changed() -> None:
    async def scenario(device: Device) -> None:
        reply = await device.ask(codes.PUT, DIMMER, b"30", options=[(codes.CONTENT_FORMAT, b"")])
        assert reply.code == codes.CHANGED
        assert (await device.ask(codes.GET, DIMMER)).payload == b"30"
        assert device.log.writes == [(DIMMER, 30)]

    _run(scenario)


def test_write_to_a_read_only_resource_answers_method_not_allowed_and_stores_nothing() -> None:
    async def scenario(device: Device) -> None:
        assert (await device.ask(codes.PUT, READ_ONLY, b"someone")).code == codes.METHOD_NOT_ALLOWED
        assert (await device.ask(codes.GET, READ_ONLY)).payload == b"devicehub"
        assert device.log.writes == []

    _run(scenario)


def test_write_of_a_bad_number_answers_bad_request() -> None:
    async def scenario(device: Device) -> None:
        reply = await device.ask(codes.PUT, DIMMER, b"bright")
        assert reply.code == codes.BAD_REQUEST and reply.payload

    _run(scenario)


def test_execute_answers_changed_and_reading_an_executable_answers_method_not_allowed() -> None:
    async def scenario(device: Device) -> None:
        assert (await device.ask(codes.POST, "/3/0/4", b"")).code == codes.CHANGED
        assert device.executed == ["/3/0/4"] and device.log.executes == [("/3/0/4", b"")]
        assert (await device.ask(codes.GET, "/3/0/4")).code == codes.METHOD_NOT_ALLOWED
        assert (await device.ask(codes.POST, TEMPERATURE, b"")).code == codes.METHOD_NOT_ALLOWED

    _run(scenario)


def test_write_attributes_are_stored_and_a_bad_one_answers_bad_request() -> None:
    async def scenario(device: Device) -> None:
        query = [(codes.URI_QUERY, b"pmin=10"), (codes.URI_QUERY, b"gt=30")]
        assert (await device.ask(codes.PUT, TEMPERATURE, options=query)).code == codes.CHANGED
        assert device.observers.attributes == {TEMPERATURE: {"pmin": 10.0, "gt": 30.0}}
        assert device.log.attribute_queries == [(TEMPERATURE, ["pmin=10", "gt=30"])]
        bad = await device.ask(codes.PUT, TEMPERATURE, options=[(codes.URI_QUERY, b"pmin=soon")])
        assert bad.code == codes.BAD_REQUEST
        assert device.observers.attributes == {TEMPERATURE: {"pmin": 10.0, "gt": 30.0}}
        missing = await device.ask(codes.PUT, "/3303/9", options=query)
        assert missing.code == codes.NOT_FOUND

    _run(scenario)


def test_observe_answers_the_read_with_observe_zero_and_a_write_notifies() -> None:
    async def scenario(device: Device) -> None:
        reply = await device.ask(codes.GET, DIMMER, options=[(codes.OBSERVE, b"")], token=b"ob")
        assert reply.code == codes.CONTENT and reply.options[0] == (codes.OBSERVE, b"")
        assert await device.ask(codes.PUT, DIMMER, b"42") == Reply(codes.CHANGED)
        await device.clock.advance(0)
        assert device.sent == [(codes.CONTENT, b"ob", b"42")]

    _run(scenario)


def test_observe_cancel_ends_the_observation() -> None:
    async def scenario(device: Device) -> None:
        await device.ask(codes.GET, BATTERY, options=[(codes.OBSERVE, b"")], token=b"ob")
        reply = await device.ask(codes.GET, BATTERY, options=[(codes.OBSERVE, b"\x01")], token=b"ob")
        assert (reply.code, reply.payload) == (codes.CONTENT, b"100")
        assert device.observers.by_token == {}

    _run(scenario)
