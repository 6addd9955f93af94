"""Block-wise transfer (RFC 7959) both ways: Block1 uploads reassembled within budgets and Block2 bodies served a
block at a time (server side), bodies sent in Block1 blocks and Block2 continuations fetched (client side)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

from devicehub._core import CoapMessage, coap_decode, coap_encode, coap_encode_uint
from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceProtocolError
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.messages import Address, Options, Reply, Stats, option_values
from devicehub.lwm2m.coap.parameters import (
    BLOCK1_RETRY_S,
    EXCHANGE_LIFETIME,
    MAX_BODY,
    MIN_BLOCK_SIZE,
    Limits,
    block_szx,
)


class Exchange(Protocol):
    """One request/response exchange of the layer below (the endpoint's token layer)."""

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
    ) -> CoapMessage: ...


@dataclass(slots=True)
class _Upload:
    """An unfinished Block1 request body (RFC 7959 §2.3)."""

    started_at: float
    body: bytearray = field(default_factory=bytearray)


class Uploads:
    """Unfinished Block1 uploads by (peer, path), bounded per peer and in total (issue 14 #3)."""

    def __init__(self, clock: Clock, limits: Limits, stats: Stats) -> None:
        self._clock = clock
        self._limits = limits
        self._stats = stats
        # unfinished uploads in the order they started, the bytes each peer holds in them, and the total
        self._uploads: OrderedDict[tuple[Address, str], _Upload] = OrderedDict()
        self._by_peer: dict[Address, int] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._uploads)

    @property
    def peers(self) -> int:
        return len(self._by_peer)

    def take(self, message: CoapMessage, remote: Address, block1: tuple[int, bool, int], szx: int) -> bytes | Reply:
        """Collect one Block1 part (RFC 7959 §2.3): the whole body once the last part came, else the reply to send
        (2.31 naming the block and our preferred size `szx`, or the refusal)."""
        num, more, part_szx = block1
        key = (remote, message.uri_path)
        size = 1 << (part_szx + 4)
        self.prune(self._clock.now())
        if num == 0:
            self._drop(key)
            upload: _Upload | None = _Upload(self._clock.now())
        else:
            upload = self._uploads.get(key)
        if upload is None or len(upload.body) != num * size:
            return self._refuse(key, Reply(codes.REQUEST_INCOMPLETE))
        too_large = Reply(codes.ENTITY_TOO_LARGE, [(codes.SIZE1, coap_encode_uint(MAX_BODY))])
        if len(upload.body) + len(message.payload) > MAX_BODY:
            return self._refuse(key, too_large)
        if not more:
            self._drop(key)
            return bytes(upload.body) + message.payload
        grow = len(message.payload)
        if self._by_peer.get(remote, 0) + grow > self._limits.block1_peer_bytes:
            return self._refuse(key, too_large)
        if self.bytes + grow > self._limits.block1_total_bytes:
            retry = [(codes.MAX_AGE, coap_encode_uint(BLOCK1_RETRY_S))]
            return self._refuse(key, Reply(codes.SERVICE_UNAVAILABLE, retry))
        upload.body.extend(message.payload)
        self._uploads[key] = upload
        self._by_peer[remote] = self._by_peer.get(remote, 0) + grow
        self.bytes += grow
        # §2.5: the 2.31 names the block it acknowledges and the size this endpoint prefers
        return Reply(codes.CONTINUE, [(codes.BLOCK1, coap_encode_uint(num << 4 | 0x8 | min(part_szx, szx)))])

    def _refuse(self, key: tuple[Address, str], reply: Reply) -> Reply:
        self._drop(key)
        self._stats.block1_refused += 1
        return reply

    def _drop(self, key: tuple[Address, str]) -> None:
        upload = self._uploads.pop(key, None)
        if upload is None:
            return
        remote = key[0]
        held = self._by_peer.get(remote, 0) - len(upload.body)
        if held > 0:
            self._by_peer[remote] = held
        else:
            self._by_peer.pop(remote, None)
        self.bytes -= len(upload.body)

    def prune(self, now: float) -> None:
        """Drop the uploads unfinished EXCHANGE_LIFETIME after their first block."""
        while self._uploads:
            key, upload = next(iter(self._uploads.items()))
            if now - upload.started_at < EXCHANGE_LIFETIME:
                break
            self._stats.block1_expired += 1
            self._drop(key)


def too_large(max_payload: int, block1: tuple[int, bool, int] | None) -> Reply:
    """RFC 7959 §2.9.3: a request payload too large for one message here; Size1 says how much, a Block1 the size
    we want."""
    size = [(codes.SIZE1, coap_encode_uint(max_payload))]
    if block1 is not None:
        size.append((codes.BLOCK1, coap_encode_uint(block1[0] << 4 | block_szx(max_payload))))
    return Reply(codes.ENTITY_TOO_LARGE, size)


def serve_block2(request: CoapMessage, reply: Reply, szx: int) -> Reply:
    """The block of `reply` the request asks for (RFC 7959 §2.4), the first one when it asks for none and the body
    is larger than a block of `szx`; the handler builds the whole body again for each block."""
    if any(number == codes.BLOCK2 for number, _ in reply.options):
        return reply  # the handler served one block itself (lwm2m/file_server.py reads only that block)
    asked = request.block2
    if asked is None and len(reply.payload) <= 1 << (szx + 4):
        return reply
    szx = szx if asked is None else min(asked[2], szx)
    offset = 0 if asked is None else asked[0] << (asked[2] + 4)
    size = 1 << (szx + 4)
    if offset and offset >= len(reply.payload):
        return Reply(codes.BAD_OPTION, payload=b"block out of range")  # §2.2
    more = offset + size < len(reply.payload)
    options = [*reply.options, (codes.BLOCK2, coap_encode_uint((offset // size) << 4 | (0x8 if more else 0) | szx))]
    if offset == 0:
        options.append((codes.SIZE2, coap_encode_uint(len(reply.payload))))
    return Reply(reply.code, options, reply.payload[offset : offset + size])


def first_block2(options: Options, payload: bytes, szx: int) -> tuple[Options, bytes]:
    """A notification body larger than a block goes as its first Block2 block; the observer fetches the rest
    (RFC 7959 §3.4)."""
    size = 1 << (szx + 4)
    if len(payload) <= size:
        return options, payload
    block = [(codes.BLOCK2, coap_encode_uint(0x8 | szx)), (codes.SIZE2, coap_encode_uint(len(payload)))]
    return [*options, *block], payload[:size]


def size_hint(response: CoapMessage) -> int | None:
    """The block SZX a 4.13 asks for: its Block1 preference (RFC 7959 §2.9.3), else its Size1, the largest
    body the device takes in one message (RFC 7252 §5.10.9); None without either."""
    block1 = response.block1
    if block1 is not None:
        return block1[2]
    size1 = option_values(response.options, codes.SIZE1)
    if size1 and int.from_bytes(size1[0], "big") >= MIN_BLOCK_SIZE:
        return block_szx(int.from_bytes(size1[0], "big"))
    return None


async def send_blocks(
    exchange: Exchange,
    remote: Address,
    code: int,
    options: Options,
    payload: bytes,
    szx: int,
    confirmable: bool,
    timing: tuple[float, int] | None,
) -> CoapMessage:
    """Block1 upload (RFC 7959 §2.5): the device may ask for smaller blocks in its 2.31 answers (the rest
    goes at that size) or in a 4.13 (the upload starts again at that size); sizes only ever shrink."""
    base = [(n, v) for n, v in options if n not in (codes.BLOCK1, codes.SIZE1)]
    offset = 0
    while True:
        size = 1 << (szx + 4)
        num = offset // size
        more = offset + size < len(payload)
        block = [(codes.BLOCK1, coap_encode_uint(num << 4 | (0x8 if more else 0) | szx))]
        if num == 0:
            block.append((codes.SIZE1, coap_encode_uint(len(payload))))  # §4: the size of the whole body
        response = await exchange(
            remote, code, [*base, *block], payload[offset : offset + size], confirmable, None,
            expect_response=True, timing=timing,
        )  # fmt: skip
        if response.code == codes.CONTINUE and more:
            preferred = response.block1
            if preferred is not None and preferred[2] < szx:
                szx = preferred[2]
            offset += size
            continue
        if response.code == codes.ENTITY_TOO_LARGE:
            smaller = size_hint(response)
            if smaller is not None and smaller < szx:
                szx, offset = smaller, 0
                continue
        return response


async def complete_block2(
    exchange: Exchange, remote: Address, code: int, options: Options, first: CoapMessage, confirmable: bool
) -> CoapMessage:
    """Fetch the blocks after `first` (a response or notification whose Block2 has M set) and join them.

    RFC 7959 §3.4: the later blocks are asked for without Observe, and the joined message keeps what the
    first block carried (its Observe above all: that is what says the observation was established); each
    block must come in order and with the first block's ETag, or the representation changed under us."""
    body = bytearray(first.payload)
    block2 = first.block2
    etag = option_values(first.options, codes.ETAG)
    base = [(n, v) for n, v in options if n not in (codes.BLOCK2, codes.OBSERVE)]
    while block2 is not None and block2[1]:
        szx = block2[2]
        if len(body) > MAX_BODY:
            raise DeviceProtocolError(f"response body from {remote[0]}:{remote[1]} exceeds {MAX_BODY} bytes")
        offset = len(body)
        option = (codes.BLOCK2, coap_encode_uint(((offset >> (szx + 4)) << 4) | szx))
        part = await exchange(remote, code, [*base, option], b"", confirmable, None, expect_response=True)
        if part.code != first.code:
            return part  # the device failed the continuation: its answer is the answer
        block2 = part.block2
        if block2 is None or block2[0] << (block2[2] + 4) != offset:
            raise DeviceProtocolError(f"block {block2} from {remote[0]}:{remote[1]} is not at offset {offset}")
        if option_values(part.options, codes.ETAG) != etag:
            raise DeviceProtocolError(f"representation from {remote[0]}:{remote[1]} changed between blocks")
        body.extend(part.payload)
    kept = [(n, v) for n, v in first.options if n not in (codes.BLOCK2, codes.SIZE2)]
    return coap_decode(coap_encode(first.mtype, first.code, first.mid, first.token, kept, bytes(body)))
