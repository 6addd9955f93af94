"""Block-wise transfer (RFC 7959) both ways, with a fake exchange below and a manual clock: Block2 reassembly and
serving, Block1 upload and reassembly, and the size bounds."""

from __future__ import annotations

import asyncio

import pytest

from devicehub._core import CoapMessage, coap_decode, coap_encode, coap_encode_uint
from devicehub.clock import ManualClock
from devicehub.domain.device_results import DeviceProtocolError
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap import blockwise
from devicehub.lwm2m.coap.messages import Address, Options, Reply, Stats
from devicehub.lwm2m.coap.parameters import MAX_BODY, Limits

PEER: Address = ("192.0.2.1", 5683)
BODY = bytes(range(256)) * 10  # 2 560 bytes


def message(mtype: int, code: int, options: Options, payload: bytes = b"") -> CoapMessage:
    return coap_decode(coap_encode(mtype, code, 1, b"t", options, payload))


def block(number: int, num: int, more: bool, szx: int) -> tuple[int, bytes]:
    return number, coap_encode_uint(num << 4 | (0x8 if more else 0) | szx)


class Device:
    """Serves BODY block by block (as serve_block2 does) and records what it was asked."""

    def __init__(self, etags: list[bytes] | None = None) -> None:
        self.asked: list[Options] = []
        self._etags = etags

    async def __call__(
        self,
        remote: Address,
        code: int,
        options: Options,
        payload: bytes,
        confirmable: bool,
        token: bytes | None,
        *,
        expect_response: bool,
        timing: tuple[float, int] | None = None,
    ) -> CoapMessage:
        self.asked.append(options)
        request = message(codes.CON, code, options, payload)
        served = blockwise.serve_block2(request, Reply(codes.CONTENT, payload=BODY), 4)
        etag = [] if self._etags is None else [(codes.ETAG, self._etags[len(self.asked) % len(self._etags)])]
        return message(codes.ACK, served.code, [*etag, *served.options], served.payload)


def test_block2_continuations_are_fetched_in_order_and_joined() -> None:
    async def scenario() -> None:
        device = Device()
        first = await device(PEER, codes.GET, [(codes.URI_PATH, b"5")], b"", True, None, expect_response=True)
        assert len(first.payload) == 256 and first.block2 == (0, True, 4)
        whole = await blockwise.complete_block2(device, PEER, codes.GET, [(codes.URI_PATH, b"5")], first, True)
        assert whole.payload == BODY and whole.block2 is None
        assert [dict(options)[codes.BLOCK2] for options in device.asked[1:]] == [
            coap_encode_uint(n << 4 | 4) for n in range(1, 10)
        ]

    asyncio.run(scenario())


def test_a_representation_that_changes_between_blocks_is_refused() -> None:
    async def scenario() -> None:
        device = Device(etags=[b"a", b"b"])
        first = await device(PEER, codes.GET, [], b"", True, None, expect_response=True)
        with pytest.raises(DeviceProtocolError):
            await blockwise.complete_block2(device, PEER, codes.GET, [], first, True)

    asyncio.run(scenario())


def test_a_body_larger_than_a_block_is_served_from_the_asked_block() -> None:
    reply = Reply(codes.CONTENT, payload=BODY)
    first = blockwise.serve_block2(message(codes.CON, codes.GET, []), reply, 6)
    assert first.payload == BODY[:1024] and dict(first.options)[codes.SIZE2] == coap_encode_uint(len(BODY))
    last = blockwise.serve_block2(message(codes.CON, codes.GET, [block(codes.BLOCK2, 2, False, 6)]), reply, 6)
    assert last.payload == BODY[2048:] and dict(last.options)[codes.BLOCK2] == coap_encode_uint(2 << 4 | 6)
    beyond = blockwise.serve_block2(message(codes.CON, codes.GET, [block(codes.BLOCK2, 3, False, 6)]), reply, 6)
    assert beyond.code == codes.BAD_OPTION


class Uploader:
    """Answers Block1 parts with an `Uploads` table, as the responder does."""

    def __init__(self, szx: int = 6) -> None:
        self.uploads = blockwise.Uploads(ManualClock(), Limits(), Stats())
        self.szx = szx
        self.body: bytes | None = None

    async def __call__(
        self,
        remote: Address,
        code: int,
        options: Options,
        payload: bytes,
        confirmable: bool,
        token: bytes | None,
        *,
        expect_response: bool,
        timing: tuple[float, int] | None = None,
    ) -> CoapMessage:
        request = message(codes.CON, code, options, payload)
        assert request.block1 is not None
        taken = self.uploads.take(request, remote, request.block1, self.szx)
        if isinstance(taken, Reply):
            return message(codes.ACK, taken.code, taken.options, taken.payload)
        self.body = taken
        return message(codes.ACK, codes.CHANGED, [])


def test_a_block1_upload_follows_the_smaller_size_the_peer_prefers() -> None:
    async def scenario() -> None:
        server = Uploader(szx=4)  # prefers 256-byte blocks
        answer = await blockwise.send_blocks(server, PEER, codes.PUT, [], BODY, 6, True, None)
        assert answer.code == codes.CHANGED and server.body == BODY and len(server.uploads) == 0

    asyncio.run(scenario())


def test_a_block1_part_out_of_order_is_refused_as_incomplete() -> None:
    uploads = blockwise.Uploads(ManualClock(), Limits(), Stats())
    part = message(codes.CON, codes.PUT, [block(codes.BLOCK1, 1, True, 6)], b"x" * 1024)
    refused = uploads.take(part, PEER, (1, True, 6), 6)
    assert isinstance(refused, Reply) and refused.code == codes.REQUEST_INCOMPLETE


def test_block1_uploads_are_bounded_per_peer_in_total_and_per_body() -> None:
    stats = Stats()
    uploads = blockwise.Uploads(ManualClock(), Limits(block1_peer_bytes=2048, block1_total_bytes=3072), stats)

    def part(remote: Address, path: bytes, num: int) -> bytes | Reply:
        request = message(
            codes.CON, codes.PUT, [(codes.URI_PATH, path), block(codes.BLOCK1, num, True, 6)], b"x" * 1024
        )
        return uploads.take(request, remote, (num, True, 6), 6)

    assert isinstance(part(PEER, b"a", 0), Reply) and isinstance(part(PEER, b"b", 0), Reply)
    own = part(PEER, b"c", 0)  # a third KiB for this peer: over its 2 KiB
    assert isinstance(own, Reply) and own.code == codes.ENTITY_TOO_LARGE
    other: Address = ("192.0.2.9", 5683)
    assert part(other, b"a", 0) == Reply(codes.CONTINUE, [block(codes.BLOCK1, 0, True, 6)])
    node = part(other, b"b", 0)  # a fourth KiB held in all: over the node's 3 KiB
    assert isinstance(node, Reply) and node.code == codes.SERVICE_UNAVAILABLE
    assert stats.block1_refused == 2 and uploads.bytes == 3072
    whole = message(codes.CON, codes.PUT, [block(codes.BLOCK1, 0, True, 6)], b"x" * 1024)
    big = blockwise.Uploads(ManualClock(), Limits(block1_peer_bytes=4 * MAX_BODY), Stats())
    for num in range(MAX_BODY // 1024):
        assert isinstance(big.take(whole, PEER, (num, True, 6), 6), Reply)
    over = big.take(whole, PEER, (MAX_BODY // 1024, True, 6), 6)
    assert isinstance(over, Reply) and over.code == codes.ENTITY_TOO_LARGE


def test_an_unfinished_upload_expires_after_the_exchange_lifetime() -> None:
    clock = ManualClock()
    stats = Stats()
    uploads = blockwise.Uploads(clock, Limits(), stats)
    uploads.take(message(codes.CON, codes.PUT, [], b"x" * 1024), PEER, (0, True, 6), 6)
    clock.jump(247.0)
    uploads.prune(clock.now())
    assert len(uploads) == 0 and uploads.bytes == 0 and stats.block1_expired == 1
