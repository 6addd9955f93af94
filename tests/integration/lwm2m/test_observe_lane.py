"""The plain listener's notifications through the Rust receive path (issue 15 #2), on real UDP.

A raw socket registers with Wakaama's own Register datagram and answers the server's Observe itself, then sends
notifications byte by byte. Once the server has accepted one notification of an observation over plain UDP, the
next ones are taken by the `ObserveLane` in the receive call: delivered, acknowledged, de-duplicated and ordered
as the Python path does; whatever the lane must not judge (an error response, a request's answer) still reaches
the Python path, and each change of the server's state disarms what it touches.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from devicehub._core import CoapMessage, coap_decode, coap_encode, coap_encode_uint
from devicehub.lwm2m import codes
from devicehub.node import Node
from support.node import reported, run, running_node, wait_reported
from support.raw_device import WAKAAMA_LINKS, WAKAAMA_REGISTER, RawClient, raw_client, wakaama_registers
from support.waiting import eventually

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the lane runs in the recvmmsg reader (Linux)")

TEMPERATURE = "/3303/0/5700"


class ObserveAnswers:
    """Answers the server's GETs with Observe: a piggy-backed 2.05, Observe 0, "20.0" (or only an empty ACK when
    `separate`, the response to come later from the test); remembers each request."""

    def __init__(self) -> None:
        self.requests: list[CoapMessage] = []
        self.separate = False

    def __call__(self, message: CoapMessage) -> bytes | None:
        self.requests.append(message)
        if self.separate:
            return coap_encode(codes.ACK, 0, message.mid, b"", [], b"")
        options = [(codes.OBSERVE, coap_encode_uint(0)), (codes.CONTENT_FORMAT, b"")]
        return coap_encode(codes.ACK, codes.CONTENT, message.mid, message.token, options, b"20.0")


def notification(mtype: int, mid: int, token: bytes, seq: int, value: bytes, code: int = codes.CONTENT) -> bytes:
    options = [(codes.OBSERVE, coap_encode_uint(seq)), (codes.CONTENT_FORMAT, b"")]
    return coap_encode(mtype, code, mid, token, options, value)


def lane(node: Node, name: str) -> float:
    return node.lwm2m.metrics()[f"coap_{name}"]


async def observed(node: Node, client: RawClient, answers: ObserveAnswers) -> tuple[str, bytes]:
    """Register, observe TEMPERATURE, and get the observation armed by one notification the Python path accepts;
    returns (device id, token)."""
    device_id = await wakaama_registers(client)
    response = await node.lwm2m.observe(device_id, TEMPERATURE)
    assert (response.code, response.observe) == (codes.CONTENT, 0)
    token = answers.requests[-1].token
    client.send(notification(codes.NON, 0x100, token, 1, b"21.0"))
    await wait_reported(node, device_id, TEMPERATURE, b"21.0")
    assert lane(node, "lane_armed") == 1
    return device_id, token


async def not_delivered(node: Node, client: RawClient, device_id: str, token: bytes, mid: int, value: bytes) -> None:
    """Nothing is armed now, and a value sent with `token` is an unknown notification: the snapshot keeps 21.0."""
    assert lane(node, "lane_armed") == 0
    unknown = lane(node, "unknown_notifications")
    client.send(notification(codes.NON, mid, token, 9, value))
    await eventually(lambda: lane(node, "unknown_notifications") == unknown + 1)
    assert await reported(node, device_id, TEMPERATURE) == b"21.0"


def test_armed_notifications_are_delivered_acknowledged_once_and_ordered_without_the_python_path(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        answers = ObserveAnswers()
        async with running_node(tmp_path) as node, raw_client(node, answers) as client:
            device_id, token = await observed(node, client, answers)
            taken = lane(node, "lane_taken")
            notified = node.lwm2m.stats.notifications

            client.send(notification(codes.NON, 0x101, token, 2, b"22.0"))
            await wait_reported(node, device_id, TEMPERATURE, b"22.0")
            assert lane(node, "lane_taken") == taken + 1

            con = notification(codes.CON, 0x102, token, 3, b"23.0")
            client.send(con)
            assert await client.receive() == bytes.fromhex("60000102")  # the empty ACK of MID 0x0102
            await wait_reported(node, device_id, TEMPERATURE, b"23.0")
            client.send(con)  # its retransmission (the ACK was lost): acknowledged again, delivered once
            assert await client.receive() == bytes.fromhex("60000102")
            assert lane(node, "duplicates") == 1

            client.send(notification(codes.NON, 0x103, token, 2, b"19.0"))  # older than 3 (RFC 7641 §3.4)
            client.send(notification(codes.NON, 0x104, token, 4, b"24.0"))
            await wait_reported(node, device_id, TEMPERATURE, b"24.0")
            assert node.lwm2m.stats.stale_notifications == 1
            assert lane(node, "lane_taken") == taken + 5
            assert node.lwm2m.stats.notifications == notified + 3  # 22, 23 and 24: the stale one is not
            assert lane(node, "notifications") >= 5

    run(scenario())


def test_an_error_response_reaches_the_python_path_and_ends_the_observation(tmp_path: Path) -> None:
    """RFC 7641 §3.2: a notification with an error code ends the observation; a value after it is not taken."""

    async def scenario() -> None:
        answers = ObserveAnswers()
        async with running_node(tmp_path) as node, raw_client(node, answers) as client:
            device_id, token = await observed(node, client, answers)
            client.send(notification(codes.NON, 0x200, token, 2, b"", code=codes.NOT_FOUND))
            await eventually(lambda: not node.lwm2m.observing(device_id, TEMPERATURE))
            await not_delivered(node, client, device_id, token, 0x201, b"30.0")

    run(scenario())


def test_a_cancelled_observation_is_disarmed_and_its_next_value_is_not_delivered(tmp_path: Path) -> None:
    async def scenario() -> None:
        answers = ObserveAnswers()
        async with running_node(tmp_path) as node, raw_client(node, answers) as client:
            device_id, token = await observed(node, client, answers)
            await node.lwm2m.cancel_observe(device_id, TEMPERATURE)
            assert answers.requests[-1].observe == 1  # the proactive cancel went out with the token
            await not_delivered(node, client, device_id, token, 0x300, b"31.0")

    run(scenario())


def test_a_separate_answer_to_observing_again_with_the_same_token_is_the_requests_not_a_notification(
    tmp_path: Path,
) -> None:
    """Observing a path again reuses its token (RFC 7641 §4.1): the device's separate CON 2.05 answer carries that
    token and Observe 0 (Anjay restarts its numbers); it must complete the request, not pass as a stale value."""

    async def scenario() -> None:
        answers = ObserveAnswers()
        async with running_node(tmp_path) as node, raw_client(node, answers) as client:
            device_id, token = await observed(node, client, answers)
            answers.separate = True
            again = asyncio.ensure_future(node.lwm2m.observe(device_id, TEMPERATURE))
            await eventually(lambda: len(answers.requests) == 2)
            assert answers.requests[-1].token == token
            assert lane(node, "lane_armed") == 0
            client.send(notification(codes.CON, 0x400, token, 0, b"25.0"))
            assert await client.receive() == bytes.fromhex("60000400")
            response = await asyncio.wait_for(again, 5)
            assert (response.code, response.observe, response.payload) == (codes.CONTENT, 0, b"25.0")
            client.send(notification(codes.NON, 0x401, token, 1, b"26.0"))  # the new stream's first value
            await wait_reported(node, device_id, TEMPERATURE, b"26.0")
            client.send(notification(codes.NON, 0x402, token, 2, b"27.0"))
            await wait_reported(node, device_id, TEMPERATURE, b"27.0")
            assert lane(node, "lane_armed") == 1

    run(scenario())


def test_an_update_from_a_new_address_disarms_the_device(tmp_path: Path) -> None:
    """A NAT rebinding: the device's Update comes from another port. What was armed at the old address is
    disarmed (the server's address map changed); the next value from the new address is taken by the Python
    path and arms the observation there again."""

    async def scenario() -> None:
        answers = ObserveAnswers()
        async with running_node(tmp_path) as node:
            async with raw_client(node, answers) as client:
                device_id, token = await observed(node, client, answers)
            async with raw_client(node, answers) as moved:
                update = coap_encode(codes.CON, codes.POST, 0x500, b"\x05", codes.path_options(f"/rd/{device_id}"), b"")
                moved.send(update)
                assert coap_decode(await moved.receive()).code == codes.CHANGED
                assert lane(node, "lane_armed") == 0
                moved.send(notification(codes.NON, 0x501, token, 2, b"28.0"))
                await wait_reported(node, device_id, TEMPERATURE, b"28.0")
                assert lane(node, "lane_armed") == 1
                taken = lane(node, "lane_taken")
                moved.send(notification(codes.NON, 0x502, token, 3, b"29.0"))
                await wait_reported(node, device_id, TEMPERATURE, b"29.0")
                assert lane(node, "lane_taken") == taken + 1

    run(scenario())


def test_an_update_from_the_same_address_that_drops_the_object_disarms_its_observation(tmp_path: Path) -> None:
    """The Update's links no longer cover /3303: the observation ends there and then, with no datagram or request
    of its own to disarm it; a value the device still sends for it is not delivered."""

    async def scenario() -> None:
        answers = ObserveAnswers()
        async with running_node(tmp_path) as node, raw_client(node, answers) as client:
            device_id, token = await observed(node, client, answers)
            options = [*codes.path_options(f"/rd/{device_id}"), (codes.CONTENT_FORMAT, coap_encode_uint(40))]
            client.send(coap_encode(codes.CON, codes.POST, 0x600, b"\x06", options, b"</1/0>,</3/0>"))
            assert coap_decode(await client.receive()).code == codes.CHANGED
            await not_delivered(node, client, device_id, token, 0x601, b"32.0")

    run(scenario())


def test_registering_again_from_the_same_address_disarms_the_old_registrations_observations(tmp_path: Path) -> None:
    """A Register for a known endpoint is a restart (spec §2.1): the old observation's token means nothing now."""

    async def scenario() -> None:
        answers = ObserveAnswers()
        async with running_node(tmp_path) as node, raw_client(node, answers) as client:
            device_id, token = await observed(node, client, answers)
            register = coap_decode(WAKAAMA_REGISTER + WAKAAMA_LINKS)
            client.send(coap_encode(codes.CON, codes.POST, 0x700, b"\x07", register.options, register.payload))
            assert coap_decode(await client.receive()).code == codes.CREATED
            await not_delivered(node, client, device_id, token, 0x701, b"33.0")

    run(scenario())
