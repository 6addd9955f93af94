"""A CoAP endpoint (RFC 7252) on one UDP socket, used by both the LwM2M server and the device simulator.

What it owns: message IDs and tokens of what it sends, retransmission of its confirmable messages with
exponential back-off, de-duplication of what it receives by (remote, message ID), piggy-backed or separate
responses, and block-wise transfer both ways (RFC 7959, bodies up to 1 MiB): large requests go out in Block1
blocks of a negotiated size and come in reassembled; large responses and notifications go out as Block2 blocks
and come in completed. Messages it cannot process are refused as RFC 7252 says: a CON with a format error gets
RST (§4.2), a CON request with an unrecognised critical option gets 4.02 (§5.4.1).
What it leaves to its owner: what a request means (`on_request`) and whether an unsolicited response belongs to
an observation (`on_notification`): that is how a device's auto-observe tokens can be adopted and why an unknown
confirmable notification gets RST while an unknown non-confirmable one is ignored (lwm2m-device-side.md §0, §4).
Message encoding and decoding is the Rust codec. Malformed datagrams are counted and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import struct
import sys
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from devicehub._core import (
    CoapError,
    CoapMessage,
    ObserveLane,
    coap_decode,
    coap_encode,
    coap_encode_uint,
    udp_send_batch,
)
from devicehub.clock import Clock
from devicehub.errors import Unavailable
from devicehub.lwm2m import codes
from devicehub.lwm2m.errors import DeviceProtocolError, DeviceReset, DeviceTimeout, EndpointClosed
from devicehub.ratelimit import SourceLimits
from devicehub.store.failures import unavailable

log = logging.getLogger("devicehub.coap")

# sendmmsg(2) is Linux's: elsewhere the replies of a loop turn still go out together, one sendto each
SEND_BATCHES = sys.platform == "linux"
# datagrams a loop turn holds for its end at most: the one that fills the batch sends it at once, so a turn that
# sends a great many (a storm's answers, a simulator's notifications) keeps a bounded list and bounded latency
SEND_BATCH = 256

Address = tuple[str, int]
Options = list[tuple[int, bytes]]

# RFC 7252 §4.8 transmission parameters
ACK_TIMEOUT = 2.0
ACK_RANDOM_FACTOR = 1.5
MAX_RETRANSMIT = 4
EXCHANGE_LIFETIME = 247.0
MAX_TRANSMIT_WAIT = 93.0
UNAVAILABLE_RETRY_S = (30, 90)  # Max-Age of a 5.03 answered while the store cannot write
UNAVAILABLE_LOG_S = 60.0
MAX_BODY = 1 << 20  # Block-wise bodies are capped at 1 MiB (issue 8)
MAX_DATAGRAM = 65_535
BLOCK_SZX = 6  # 1024-byte blocks, the largest RFC 7959 allows
BLOCK_SIZE = 1 << (BLOCK_SZX + 4)
MIN_BLOCK_SIZE = 16


def bound_udp_socket(host: str, port: int) -> socket.socket | None:
    """A non-blocking UDP socket bound to `host` (an IP address literal) and `port`, as the loop's
    `create_datagram_endpoint(local_addr=...)` binds one (no SO_REUSEADDR); None when `host` is a name to resolve.
    Issue 16: `local_addr` costs a getaddrinfo per socket, most of a simulated device's start (0.09 ms of CPU
    against 0.025 ms with the socket bound here), and a storm starts thousands of devices a second."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)  # ipaddress.ip_address costs more than the bind saves
            break
        except OSError:
            continue
    else:
        return None
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


SO_MEMINFO, SK_MEMINFO_DROPS = 55, 8  # linux/sock_diag.h: the socket's memory figures, the 9th is its drop count


def receive_drops(sock: Any) -> int:
    """Datagrams the kernel dropped at this socket because its receive buffer was full (0 where it cannot say)."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 4 * (SK_MEMINFO_DROPS + 1))
    except (OSError, AttributeError):
        return 0
    return int.from_bytes(raw[4 * SK_MEMINFO_DROPS : 4 * (SK_MEMINFO_DROPS + 1)], sys.byteorder)


def block_szx(size: int) -> int:
    """SZX of the largest block size (16..1024) not above `size` (RFC 7959 §2.2: size = 2 ** (SZX + 4))."""
    return max(0, min(BLOCK_SZX, size.bit_length() - 5))


# issue 14 #3, #4: what unfinished exchanges may hold. An unfinished Block1 upload lives EXCHANGE_LIFETIME from its
# first block; one peer (address) may hold two bodies' worth, all peers together 16; beyond that a peer is answered
# 4.13 (its own budget) or 5.03 + Max-Age (the node's). The de-dup cache keeps at most this many (address, MID)
# entries and cached-reply bytes, oldest dropped first: a retransmission after that is handled again, never refused.
BLOCK1_PEER_BUDGET = 2 * MAX_BODY
BLOCK1_GLOBAL_BUDGET = 16 * MAX_BODY
BLOCK1_RETRY_S = 30
SEEN_MAX_ENTRIES = 50_000
SEEN_MAX_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Reply:
    """What a request handler answers."""

    code: int
    options: Options = field(default_factory=list)
    payload: bytes = b""


Handler = Callable[[CoapMessage, bytes, Address], Awaitable[Reply | None]]
# True/False at once, or an awaitable of it when the observation must first be looked up (issue 12 #5: another
# node's or a restarted node's observation is found in the store); the ACK/RST waits for the answer
NotificationHandler = Callable[[CoapMessage, Address], "bool | Awaitable[bool]"]
# what an ObserveLane hands over per value: (device id, path, content format, payload, Observe number)
LaneNotification = tuple[str, str, "int | None", bytes, int]
LaneHandler = Callable[[list[LaneNotification], int], None]


@dataclass(slots=True)
class Stats:
    received: int = 0
    sent: int = 0
    sent_in_batches: int = 0  # of `sent`, those that went out in one sendmmsg with others of their loop turn
    store_unavailable: int = 0  # requests answered 5.03 + Max-Age because the store could not write or answer
    malformed: int = 0
    duplicates: int = 0
    rejected: int = 0
    send_errors: int = 0
    retransmissions: int = 0
    timeouts: int = 0
    resets: int = 0
    notifications: int = 0
    unknown_notifications: int = 0
    lane_taken: int = 0  # of `received`, datagrams the owner's ObserveLane took (notifications, retransmissions)
    block1_refused: int = 0
    block1_expired: int = 0
    rate_limited: int = 0  # requests dropped over their source address's (address, port) rate
    host_rate_limited: int = 0  # requests dropped over their host's rate, all its ports together (issue 28 #5)


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds of the per-peer tables (defaults above; tests shrink them to reach them quickly)."""

    block1_peer_bytes: int = BLOCK1_PEER_BUDGET
    block1_total_bytes: int = BLOCK1_GLOBAL_BUDGET
    dedup_entries: int = SEEN_MAX_ENTRIES
    dedup_bytes: int = SEEN_MAX_BYTES
    # requests a second from one source address (0: no limit), and how many it may save up (issue 14 #14)
    requests_per_second: float = 0.0
    request_burst: float = 0.0
    # the same for all the source ports of one host, an IPv6 one's whole /64 (0: no limit; issue 28 #5). Both bound
    # requests only: the notification lane (observe_lane.rs) needs neither, since it takes nothing but notifications
    # (responses) of observations this server armed for that very address and port, never a request
    host_requests_per_second: float = 0.0
    host_request_burst: float = 0.0


DEFAULT_LIMITS = Limits()


@dataclass(slots=True)
class _Upload:
    """An unfinished Block1 request body (RFC 7959 §2.3)."""

    started_at: float
    body: bytearray = field(default_factory=bytearray)


class _Acked:
    """asyncio.Event's `set`/`is_set` for one exchange, waking the one `_wait` under way (if any) through a future:
    an Event's `wait()` needs a task of its own to be raced against the timer, and that per exchange was most of
    `_wait`'s cost (issue 15)."""

    __slots__ = ("_set", "waiter")

    def __init__(self) -> None:
        self._set = False
        self.waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


@dataclass(slots=True)
class _Exchange:
    remote: Address
    token: bytes
    mid: int
    confirmable: bool
    expect_response: bool
    acked: _Acked = field(default_factory=_Acked)
    done: asyncio.Future[CoapMessage] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class CoapEndpoint(asyncio.DatagramProtocol):
    """One UDP socket speaking CoAP; see the module docstring for the split of work."""

    def __init__(
        self,
        clock: Clock,
        on_request: Handler,
        on_notification: NotificationHandler | None = None,
        *,
        ack_timeout: float = ACK_TIMEOUT,
        max_retransmit: int = MAX_RETRANSMIT,
        response_timeout: float = MAX_TRANSMIT_WAIT,
        block_size: int = BLOCK_SIZE,
        max_payload: int | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self._clock = clock
        self._limits = limits
        self._on_request = on_request
        self._on_notification = on_notification
        self._ack_timeout = ack_timeout
        self._max_retransmit = max_retransmit
        self._response_timeout = response_timeout
        # the block size this endpoint sends and prefers to receive (Block1 in 2.31 answers, Block2 it serves)
        self._szx = block_szx(block_size)
        # the largest request payload one datagram may carry here: above it, 4.13 with Size1 (RFC 7959 §2.9.3)
        self._max_payload = max_payload
        self._transport: asyncio.DatagramTransport | None = None
        self._next_mid = random.randrange(0x10000)
        self._token_prefix = os.urandom(4)
        self._token_counter = random.randrange(1 << 32)
        self._by_mid: dict[tuple[Address, int], _Exchange] = {}
        self._by_token: dict[bytes, _Exchange] = {}
        # (remote, mid) → encoded reply (None while the handler runs); pruned after EXCHANGE_LIFETIME
        self._seen: OrderedDict[tuple[Address, int], tuple[float, bytes | None]] = OrderedDict()
        self._seen_bytes = 0
        # unfinished uploads in the order they started, the bytes each peer holds in them, and the total
        self._block1: OrderedDict[tuple[Address, str], _Upload] = OrderedDict()
        self._block1_by_peer: dict[Address, int] = {}
        self._block1_bytes = 0
        self._rates = SourceLimits(
            clock,
            (limits.requests_per_second, limits.request_burst),
            (limits.host_requests_per_second, limits.host_request_burst),
        )
        self._tasks: set[asyncio.Task[None]] = set()
        # what this loop turn sends, flushed together at its end (issue 15 #2): on a plain UDP socket everything the
        # endpoint sends (answers, requests, retransmissions, ACKs), on other transports the notifications' ACK/RST
        self._replies: list[tuple[bytes, Address]] = []
        self._flush_due = False
        self._socket_fd: int | None = None  # the plain UDP socket's, once the owner says the transport is one
        self.stats = Stats()
        self._said_unavailable_at = float("-inf")
        # the owner's armed observations, recognised by a batch reader before this endpoint sees the datagram
        self.observe_lane: ObserveLane | None = None
        self._on_lane: LaneHandler | None = None

    # ---- lifecycle --------------------------------------------------------------------------------
    @classmethod
    async def bind(
        cls,
        host: str,
        port: int,
        clock: Clock,
        on_request: Handler,
        on_notification: NotificationHandler | None = None,
        *,
        ack_timeout: float = ACK_TIMEOUT,
        max_retransmit: int = MAX_RETRANSMIT,
        block_size: int = BLOCK_SIZE,
        max_payload: int | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> CoapEndpoint:
        loop = asyncio.get_running_loop()

        def protocol_factory() -> CoapEndpoint:
            return cls(
                clock,
                on_request,
                on_notification,
                ack_timeout=ack_timeout,
                max_retransmit=max_retransmit,
                block_size=block_size,
                max_payload=max_payload,
                limits=limits,
            )

        sock = bound_udp_socket(host, port)
        if sock is None:  # a host name: the loop resolves it
            _, protocol = await loop.create_datagram_endpoint(protocol_factory, local_addr=(host, port))
        else:
            try:
                _, protocol = await loop.create_datagram_endpoint(protocol_factory, sock=sock)
            except BaseException:
                sock.close()
                raise
        protocol.send_in_batches()
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    def send_in_batches(self) -> None:
        """The transport is a plain UDP socket (not a DTLS or TCP adapter): the datagrams one loop turn sends go out
        in one sendmmsg on its descriptor at the turn's end (Linux). Called by whoever created the socket, right
        after."""
        socket = self._transport.get_extra_info("socket") if self._transport is not None else None
        self._socket_fd = socket.fileno() if SEND_BATCHES and socket is not None else None

    def attach_lane(self, lane: ObserveLane, on_values: LaneHandler) -> None:
        """Let a batch reader (lwm2m/udp.py) recognise `lane`'s notifications: their values go to `on_values`
        with the count of stale ones dropped; a request sent with a token disarms it (its answer is the exchange's)."""
        self.observe_lane = lane
        self._on_lane = on_values

    def now(self) -> float:
        return self._clock.now()

    def lane_took(
        self, values: list[LaneNotification], acks: list[tuple[bytes, Address]], counts: tuple[int, int, int]
    ) -> None:
        """What the lane took from a batch (`counts`: taken, duplicates, stale): counted as this endpoint would have
        counted them, its ACKs sent with the turn's other datagrams, the values handed on."""
        taken, duplicates, stale = counts
        stats = self.stats
        stats.received += taken
        stats.lane_taken += taken
        stats.duplicates += duplicates
        stats.notifications += taken - duplicates
        if acks:
            self._send_soon_all(acks)
        if self._on_lane is not None and (values or stale):
            self._on_lane(values, stale)

    def lane_sift(self, datagrams: list[bytes], remote: Address) -> list[bytes]:
        """Datagrams from `remote` that reached this endpoint other than by a batch reader (a DTLS session's
        decrypted records): what the lane takes goes to `lane_took`; the rest is returned for `datagram_received`."""
        assert self.observe_lane is not None
        others, values, acks, counts = self.observe_lane.sift(datagrams, remote, self._clock.now())
        if counts[0]:
            self.lane_took(values, acks, counts)
        return others

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._socket_fd = None
        for exchange in list(self._by_token.values()):
            if not exchange.done.done():
                exchange.done.set_exception(EndpointClosed("endpoint closed"))

    @property
    def address(self) -> Address:
        assert self._transport is not None
        host, port = self._transport.get_extra_info("sockname")[:2]
        return str(host), int(port)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._transport is not None:
            self._flush_replies()  # what this turn sent before closing still goes, as a direct sendto would have
            self._transport.close()
            self._transport = None

    # ---- sending ------------------------------------------------------------------------------------
    def new_token(self) -> bytes:
        self._token_counter = (self._token_counter + 1) & 0xFFFFFFFF
        return self._token_prefix + self._token_counter.to_bytes(4, "big")

    def _mid(self) -> int:
        self._next_mid = (self._next_mid + 1) & 0xFFFF
        return self._next_mid

    def new_mid(self) -> int:
        """A message ID for a datagram encoded outside the endpoint (the simulator's pre-encoded notifications)."""
        self._next_mid = (self._next_mid + 1) & 0xFFFF
        return self._next_mid

    def send_datagram(self, data: bytes, remote: Address) -> None:
        """Send a datagram encoded outside the endpoint (the simulator's pre-encoded notifications)."""
        self._send(data, remote)

    def _send(self, data: bytes, remote: Address) -> None:
        """Send now, or on a plain UDP socket at the end of this loop turn with the turn's other datagrams (one
        sendmmsg on Linux): every datagram goes through the same list, so each peer gets them in the order sent."""
        if self._socket_fd is not None:
            self._send_soon(data, remote)
            return
        if self._transport is None:
            raise EndpointClosed("endpoint closed")
        self._transport.sendto(data, remote)
        self.stats.sent += 1

    def _send_soon(self, data: bytes, remote: Address) -> None:
        """Send at the end of this loop turn together with the turn's other datagrams (one system call on Linux)."""
        if self._transport is None:
            raise EndpointClosed("endpoint closed")
        self._replies.append((data, remote))
        self._flush_later()

    def _send_soon_all(self, datagrams: list[tuple[bytes, Address]]) -> None:
        """`_send_soon` of each, in order."""
        if self._transport is None:
            raise EndpointClosed("endpoint closed")
        self._replies.extend(datagrams)
        self._flush_later()

    def _flush_later(self) -> None:
        if len(self._replies) >= SEND_BATCH:
            self._flush_replies()
        elif not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush_replies)

    def _flush_replies(self) -> None:
        self._flush_due = False
        replies, self._replies = self._replies, []
        transport = self._transport
        if transport is None or not replies:
            return  # closed meanwhile: as a sendto on a closed transport, nothing goes out
        sent = 0
        # with datagrams already queued in the transport (the socket would block), the fd would jump the queue;
        # the plain UDP transports (asyncio's, uvloop's) have get_write_buffer_size, typeshed's DatagramTransport not
        if self._socket_fd is not None and len(replies) > 1 and not cast(Any, transport).get_write_buffer_size():
            try:
                sent = udp_send_batch(self._socket_fd, replies)
                self.stats.sent_in_batches += sent
            except (OSError, ValueError):  # the first would block or failed, or a host the kernel call cannot take
                sent = 0
        # the rest one by one: the transport buffers what would block, and a failed one reaches error_received
        # (counted there) without costing those after it
        for data, remote in replies[sent:]:
            transport.sendto(data, remote)
        self.stats.sent += len(replies)

    def error_received(self, exc: Exception) -> None:
        # asyncio reports a failed sendto (or an ICMP error) here, not to the sender: count it, the sender's
        # retransmission window decides the exchange
        self.stats.send_errors += 1
        log.debug("UDP send error: %s", exc)

    async def request(
        self,
        remote: Address,
        code: int,
        options: Options,
        payload: bytes = b"",
        *,
        confirmable: bool = True,
        token: bytes | None = None,
        timing: tuple[float, int] | None = None,
    ) -> CoapMessage:
        """Send a request and return the response; Block2 continuations are fetched and joined.

        A payload larger than one block goes out in Block1 blocks (RFC 7959 §2.5); a 4.13 answer to a whole
        payload that names a smaller size (Size1, or a Block1 preference) is retried block-wise, as Californium
        does. `timing` = (ACK timeout, retransmissions) for this request instead of the endpoint's (Edge Core's
        keepalive probes use their own, spec §2.6)."""
        if len(payload) > MAX_BODY:
            raise ValueError(f"request body of {len(payload)} bytes exceeds {MAX_BODY}")
        if len(payload) > 1 << (self._szx + 4):
            response = await self._send_blocks(remote, code, options, payload, self._szx, confirmable, timing)
        else:
            response = await self._exchange(
                remote, code, options, payload, confirmable, token, expect_response=True, timing=timing
            )
            if response.code == codes.ENTITY_TOO_LARGE and len(payload) > MIN_BLOCK_SIZE:
                szx = _size_hint(response)
                if szx is None:
                    szx = block_szx(len(payload) - 1)  # no hint: the next smaller size that splits the body
                if 1 << (szx + 4) < len(payload):
                    response = await self._send_blocks(remote, code, options, payload, szx, confirmable, timing)
        block2 = response.block2
        if block2 is None or not block2[1]:
            return response
        return await self.complete_block2(remote, code, options, response, confirmable=confirmable)

    async def _send_blocks(
        self,
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
            response = await self._exchange(
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
                smaller = _size_hint(response)
                if smaller is not None and smaller < szx:
                    szx, offset = smaller, 0
                    continue
            return response

    async def send_notification(
        self, remote: Address, code: int, token: bytes, options: Options, payload: bytes, *, confirmable: bool
    ) -> None:
        """Send an observation notification; a confirmable one waits for the ACK (DeviceReset on RST).

        A body larger than a block goes as its first Block2 block; the observer fetches the rest (RFC 7959 §3.4)."""
        size = 1 << (self._szx + 4)
        if len(payload) > size:
            options = [
                *options,
                (codes.BLOCK2, coap_encode_uint(0x8 | self._szx)),
                (codes.SIZE2, coap_encode_uint(len(payload))),
            ]
            payload = payload[:size]
        if not confirmable:
            self._send(coap_encode(codes.NON, code, self._mid(), token, options, payload), remote)
            return
        await self._exchange(remote, code, options, payload, True, token, expect_response=False)

    async def _exchange(
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
        token = self.new_token() if token is None else token
        exchange = _Exchange(remote, token, self._mid(), confirmable, expect_response)
        data = coap_encode(codes.CON if confirmable else codes.NON, code, exchange.mid, token, options, payload)
        self._by_mid[(remote, exchange.mid)] = exchange
        if expect_response:
            self._by_token[token] = exchange
            if self.observe_lane is not None:
                self.observe_lane.disarm_token(remote, token)
        try:
            self._send(data, remote)
            if confirmable:
                await self._retransmit(exchange, data, timing or (self._ack_timeout, self._max_retransmit))
            if not expect_response:
                return exchange.done.result() if exchange.done.done() else _ACKED
            return await self._await_response(exchange)
        finally:
            self._by_mid.pop((remote, exchange.mid), None)
            if self._by_token.get(token) is exchange:
                del self._by_token[token]

    async def _retransmit(self, exchange: _Exchange, data: bytes, timing: tuple[float, int]) -> None:
        """Resend until ACKed (or answered, or reset); RFC 7252 §4.2 back-off."""
        ack_timeout, max_retransmit = timing
        timeout = ack_timeout * random.uniform(1.0, ACK_RANDOM_FACTOR)
        for attempt in range(max_retransmit + 1):
            if await self._wait(exchange, timeout):
                return
            if attempt == max_retransmit:
                break
            self.stats.retransmissions += 1
            self._send(data, exchange.remote)
            timeout *= 2
        self.stats.timeouts += 1
        raise DeviceTimeout(f"no ACK from {exchange.remote[0]}:{exchange.remote[1]}")

    async def _wait(self, exchange: _Exchange, timeout: float) -> bool:
        """True once the exchange is ACKed or settled; False when `timeout` (clock seconds) passes first."""
        if exchange.acked.is_set() or exchange.done.done():
            return True
        await self._until_settled(exchange, timeout, or_acked=True)
        if exchange.done.done() and exchange.done.exception() is not None:
            exchange.done.result()  # raises DeviceReset
        return exchange.acked.is_set() or exchange.done.done()

    async def _until_settled(self, exchange: _Exchange, timeout: float, *, or_acked: bool) -> None:
        """Return once the exchange settles (or, `or_acked`, is ACKed) or `timeout` clock seconds pass: one future
        woken by whichever comes first and one clock timer, no task per wait (issue 15: racing tasks in
        `asyncio.wait` was most of a request's waiting cost)."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake(_: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        if or_acked:
            exchange.acked.waiter = woken
        exchange.done.add_done_callback(wake)
        timer = self._clock.call_later(timeout, wake)
        try:
            await woken
        finally:
            timer.cancel()
            exchange.done.remove_done_callback(wake)
            if or_acked:
                exchange.acked.waiter = None

    async def _await_response(self, exchange: _Exchange) -> CoapMessage:
        if not exchange.done.done():
            await self._until_settled(exchange, self._response_timeout, or_acked=False)
        if not exchange.done.done():
            self.stats.timeouts += 1
            raise DeviceTimeout(f"no response from {exchange.remote[0]}:{exchange.remote[1]}")
        return exchange.done.result()

    async def complete_block2(
        self, remote: Address, code: int, options: Options, first: CoapMessage, *, confirmable: bool = True
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
            part = await self._exchange(remote, code, [*base, option], b"", confirmable, None, expect_response=True)
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

    # ---- receiving ------------------------------------------------------------------------------------
    def datagrams_received(self, batch: list[tuple[bytes, Address]]) -> None:
        """A loop turn's datagrams from a batch reader (lwm2m/udp.py): each handled as `datagram_received` does,
        and the ACKs they produce leave together at the end of the turn. One datagram's failure is logged and
        does not cost the rest of the batch."""
        for data, addr in batch:
            try:
                self.datagram_received(data, addr)
            except Exception:
                log.exception("datagram from %s:%d not handled", addr[0], addr[1])

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        remote: Address = (addr[0], addr[1])
        self.stats.received += 1
        if len(data) > MAX_DATAGRAM:
            self.stats.malformed += 1
            return
        try:
            message = coap_decode(data)
        except CoapError as error:
            self.stats.malformed += 1
            log.debug("dropped malformed datagram from %s:%d: %s", remote[0], remote[1], error)
            # RFC 7252 §4.2: a confirmable message with a format error is rejected with RST, when its header
            # can be read far enough to know it is one and which message ID to reset
            if len(data) >= 4 and data[0] >> 6 == 1 and (data[0] >> 4) & 0x3 == codes.CON:
                self._send(coap_encode(codes.RST, 0, int.from_bytes(data[2:4], "big"), b"", [], b""), remote)
            return
        mtype, code = message.mtype, message.code
        fault = option_fault(message) if code != codes.EMPTY else None
        if mtype == codes.ACK or mtype == codes.RST:
            self._settle(message, remote, fault)
        elif codes.is_request(code):
            self._incoming_request(message, remote, fault)
        elif codes.is_response(code):
            self._incoming_response(message, remote, fault)
        elif mtype == codes.CON and code == codes.EMPTY:
            self._send(coap_encode(codes.RST, 0, message.mid, b"", [], b""), remote)  # CoAP ping
        else:
            self.stats.malformed += 1

    def _settle(self, message: CoapMessage, remote: Address, fault: str | None) -> None:
        exchange = self._by_mid.get((remote, message.mid))
        if exchange is None:
            return
        if message.mtype == codes.RST:
            self.stats.resets += 1
            if not exchange.done.done():
                exchange.done.set_exception(DeviceReset(f"{remote[0]}:{remote[1]} answered RST"))
            return
        exchange.acked.set()
        if message.code != codes.EMPTY and not exchange.done.done():
            if fault is not None:  # §5.4.1: a piggy-backed response we cannot understand is rejected
                self.stats.rejected += 1
                exchange.done.set_exception(DeviceProtocolError(f"{remote[0]}:{remote[1]} answered with {fault}"))
                return
            exchange.done.set_result(message)  # piggy-backed response

    def _incoming_response(self, message: CoapMessage, remote: Address, fault: str | None) -> None:
        if message.mtype == codes.CON and self._duplicate(message, remote):
            return
        exchange = self._by_token.get(message.token)
        if fault is not None:  # §5.4.1: rejected; a CON one with RST (§4.2)
            self.stats.rejected += 1
            if exchange is not None and exchange.remote == remote and not exchange.done.done():
                exchange.done.set_exception(DeviceProtocolError(f"{remote[0]}:{remote[1]} answered with {fault}"))
            if message.mtype == codes.CON:
                reply = coap_encode(codes.RST, 0, message.mid, b"", [], b"")
                self._remember(remote, message.mid, reply)
                self._send(reply, remote)
            return
        if exchange is not None and exchange.remote == remote and not exchange.done.done():
            exchange.acked.set()
            exchange.done.set_result(message)
            accepted = True
        elif self._on_notification is not None:
            self.stats.notifications += 1
            answer = self._on_notification(message, remote)
            if not isinstance(answer, bool):
                task = asyncio.ensure_future(self._answer_notification(message, remote, answer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return
            accepted = answer
        else:
            accepted = False
        self._acknowledge_notification(message, remote, accepted)

    async def _answer_notification(self, message: CoapMessage, remote: Address, answer: Awaitable[bool]) -> None:
        try:
            accepted = await answer
        except Exception:
            log.exception("notification handler failed for %s:%d", remote[0], remote[1])
            accepted = False
        self._acknowledge_notification(message, remote, accepted)

    def _acknowledge_notification(self, message: CoapMessage, remote: Address, accepted: bool) -> None:
        if not accepted:
            self.stats.unknown_notifications += 1
        if message.mtype == codes.CON:
            # RFC 7252 §3: version 1, type, no token, code 0.00, the notification's message ID
            reply = _EMPTY_REPLY(_EMPTY_ACK if accepted else _EMPTY_RST, 0, message.mid)
            self._remember(remote, message.mid, reply)
            self._send_soon(reply, remote)

    def _duplicate(self, message: CoapMessage, remote: Address) -> bool:
        """True for a retransmission already seen; the cached reply (if any) is sent again."""
        now = self._clock.now()
        self._prune_seen(now)
        entry = self._seen.get((remote, message.mid))
        if entry is None:
            self._seen[(remote, message.mid)] = (now, None)
            if len(self._seen) > self._limits.dedup_entries:
                self._forget_oldest_seen()
            return False
        self.stats.duplicates += 1
        if entry[1] is not None:
            self._send(entry[1], remote)
        return True

    def _remember(self, remote: Address, mid: int, reply: bytes) -> None:
        key = (remote, mid)
        entry = self._seen.get(key)  # the window runs from the receipt
        seen_at, previous = (self._clock.now(), None) if entry is None else entry
        self._seen_bytes += len(reply) - (len(previous) if previous is not None else 0)
        self._seen[key] = (seen_at, reply)
        while self._seen_bytes > self._limits.dedup_bytes and self._seen:
            self._forget_oldest_seen()

    def _forget_oldest_seen(self) -> None:
        _, (_, reply) = self._seen.popitem(last=False)
        if reply is not None:
            self._seen_bytes -= len(reply)

    def _prune_seen(self, now: float) -> None:
        while self._seen:
            seen_at, _ = next(iter(self._seen.values()))
            if now - seen_at < EXCHANGE_LIFETIME:
                break
            self._forget_oldest_seen()

    def sweep(self) -> None:
        """Drop what has outlived EXCHANGE_LIFETIME (de-dup entries, unfinished uploads) even when no datagram
        comes to prune it: the owner calls this from its periodic timer, so memory returns after a flood stops."""
        now = self._clock.now()
        self._prune_seen(now)
        self._prune_uploads(now)
        self._rates.sweep()
        if self.observe_lane is not None:
            self.observe_lane.prune(now)

    def receive_drops(self) -> int:
        """Datagrams the kernel dropped at this endpoint's UDP socket (its receive buffer was full)."""
        sock = None if self._transport is None else self._transport.get_extra_info("socket")
        return 0 if sock is None else receive_drops(sock)

    def table_sizes(self) -> dict[str, int]:
        """Sizes of the per-peer tables (issue 14 #4), for metrics and tests."""
        return {
            "dedup_entries": len(self._seen),
            "dedup_bytes": self._seen_bytes,
            "block1_transfers": len(self._block1),
            "block1_bytes": self._block1_bytes,
            "block1_peers": len(self._block1_by_peer),
            "tasks": len(self._tasks),
            "rate_buckets": len(self._rates.addresses),
            "host_rate_buckets": len(self._rates.hosts),
            **(
                {}
                if self.observe_lane is None
                else {"lane_armed": self.observe_lane.armed, "lane_acked": self.observe_lane.acked}
            ),
        }

    def _incoming_request(self, message: CoapMessage, remote: Address, fault: str | None) -> None:
        if self._duplicate(message, remote):
            return
        if (cause := self._rates.take(*remote)) is not None:
            # over its address's or its host's rate: dropped unanswered (an answer would feed the flood) and
            # forgotten, so the device's retransmission of a confirmable request is taken once the bucket has refilled
            if cause == "address":
                self.stats.rate_limited += 1
            else:
                self.stats.host_rate_limited += 1
            self._seen.pop((remote, message.mid), None)
            return
        if fault is not None:
            self.stats.rejected += 1
            if message.mtype == codes.CON:  # §5.4.1; a NON one is silently ignored (§4.3)
                self._reply(message, remote, Reply(codes.BAD_OPTION, payload=fault.encode()[:100]))
            return
        if message.has_option(codes.PROXY_URI) or message.has_option(codes.PROXY_SCHEME):
            self._reply(message, remote, Reply(codes.PROXYING_NOT_SUPPORTED))  # §5.7.2: this is no proxy
            return
        block1 = message.block1
        if self._max_payload is not None and len(message.payload) > self._max_payload:
            # RFC 7959 §2.9.3: too large for one message here; Size1 says how much, a Block1 the size we want
            size = [(codes.SIZE1, coap_encode_uint(self._max_payload))]
            if block1 is not None:
                size.append((codes.BLOCK1, coap_encode_uint(block1[0] << 4 | block_szx(self._max_payload))))
            self._reply(message, remote, Reply(codes.ENTITY_TOO_LARGE, size))
            return
        if block1 is not None:
            assembled = self._assemble(message, remote, block1)
            if assembled is None:
                return
            payload = assembled
        else:
            payload = message.payload
        task = asyncio.ensure_future(self._answer(message, payload, remote))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _assemble(self, message: CoapMessage, remote: Address, block1: tuple[int, bool, int]) -> bytes | None:
        """Collect Block1 parts (RFC 7959 §2.3); None while more are to come (2.31 already sent) or when refused."""
        num, more, szx = block1
        key = (remote, message.uri_path)
        size = 1 << (szx + 4)
        now = self._clock.now()
        self._prune_uploads(now)
        if num == 0:
            self._drop_upload(key)
            upload: _Upload | None = _Upload(now)
        else:
            upload = self._block1.get(key)
        if upload is None or len(upload.body) != num * size:
            self._drop_upload(key)
            self._refuse_block(message, remote, Reply(codes.REQUEST_INCOMPLETE))
            return None
        if len(upload.body) + len(message.payload) > MAX_BODY:
            self._drop_upload(key)
            self._refuse_block(
                message, remote, Reply(codes.ENTITY_TOO_LARGE, [(codes.SIZE1, coap_encode_uint(MAX_BODY))])
            )
            return None
        if not more:
            self._drop_upload(key)
            return bytes(upload.body) + message.payload
        grow = len(message.payload)
        if self._block1_by_peer.get(remote, 0) + grow > self._limits.block1_peer_bytes:
            self._drop_upload(key)
            self._refuse_block(
                message, remote, Reply(codes.ENTITY_TOO_LARGE, [(codes.SIZE1, coap_encode_uint(MAX_BODY))])
            )
            return None
        if self._block1_bytes + grow > self._limits.block1_total_bytes:
            self._drop_upload(key)
            retry = [(codes.MAX_AGE, coap_encode_uint(BLOCK1_RETRY_S))]
            self._refuse_block(message, remote, Reply(codes.SERVICE_UNAVAILABLE, retry))
            return None
        upload.body.extend(message.payload)
        self._block1[key] = upload
        self._block1_by_peer[remote] = self._block1_by_peer.get(remote, 0) + grow
        self._block1_bytes += grow
        # §2.5: the 2.31 names the block it acknowledges and the size this endpoint prefers
        preferred = min(szx, self._szx)
        self._reply(
            message, remote, Reply(codes.CONTINUE, [(codes.BLOCK1, coap_encode_uint(num << 4 | 0x8 | preferred))])
        )
        return None

    def _refuse_block(self, message: CoapMessage, remote: Address, reply: Reply) -> None:
        self.stats.block1_refused += 1
        self._reply(message, remote, reply)

    def _drop_upload(self, key: tuple[Address, str]) -> None:
        upload = self._block1.pop(key, None)
        if upload is None:
            return
        remote = key[0]
        held = self._block1_by_peer.get(remote, 0) - len(upload.body)
        if held > 0:
            self._block1_by_peer[remote] = held
        else:
            self._block1_by_peer.pop(remote, None)
        self._block1_bytes -= len(upload.body)

    def _prune_uploads(self, now: float) -> None:
        while self._block1:
            key, upload = next(iter(self._block1.items()))
            if now - upload.started_at < EXCHANGE_LIFETIME:
                break
            self.stats.block1_expired += 1
            self._drop_upload(key)

    async def _answer(self, message: CoapMessage, payload: bytes, remote: Address) -> None:
        try:
            reply = await self._on_request(message, payload, remote)
        except Exception as error:
            if unavailable(error):
                # the store cannot write or does not answer (Redis down, or every pooled connection busy in a storm):
                # the device retries after Max-Age, RFC 7252 §5.9.3.4, spread over a range so that devices refused
                # together do not come back together
                self._say_unavailable(error)
                max_age = [(codes.MAX_AGE, coap_encode_uint(random.randint(*UNAVAILABLE_RETRY_S)))]
                reply = Reply(codes.SERVICE_UNAVAILABLE, max_age)
            else:
                log.exception("request handler failed for %s from %s:%d", message.uri_path, remote[0], remote[1])
                reply = Reply(codes.INTERNAL_ERROR)
        if reply is not None:
            self._reply(message, remote, reply)

    def _say_unavailable(self, error: Exception) -> None:
        """Counted each time; said once a minute (the SQLite store says its own outage: only the rest is said here)."""
        self.stats.store_unavailable += 1
        now = self._clock.now()
        if not isinstance(error, Unavailable) and now - self._said_unavailable_at >= UNAVAILABLE_LOG_S:
            self._said_unavailable_at = now
            log.warning(
                "requests answered 5.03: the store does not answer (%s); %d so far", error, self.stats.store_unavailable
            )

    def _reply(self, message: CoapMessage, remote: Address, reply: Reply) -> None:
        if reply.code >> 5 == 2 and reply.code != codes.CONTINUE:
            reply = self._block2(message, reply)
        if message.mtype == codes.CON:
            data = coap_encode(codes.ACK, reply.code, message.mid, message.token, reply.options, reply.payload)
        else:
            data = coap_encode(codes.NON, reply.code, self._mid(), message.token, reply.options, reply.payload)
        self._remember(remote, message.mid, data)
        self._send(data, remote)

    def _block2(self, request: CoapMessage, reply: Reply) -> Reply:
        """Serve the block of `reply` the request asks for (RFC 7959 §2.4), the first one when it asks for none
        and the body is larger than a block; the handler builds the whole body again for each block."""
        asked = request.block2
        if asked is None and len(reply.payload) <= 1 << (self._szx + 4):
            return reply
        szx = self._szx if asked is None else min(asked[2], self._szx)
        offset = 0 if asked is None else asked[0] << (asked[2] + 4)
        size = 1 << (szx + 4)
        if offset and offset >= len(reply.payload):
            return Reply(codes.BAD_OPTION, payload=b"block out of range")  # §2.2
        more = offset + size < len(reply.payload)
        options = [*reply.options, (codes.BLOCK2, coap_encode_uint((offset // size) << 4 | (0x8 if more else 0) | szx))]
        if offset == 0:
            options.append((codes.SIZE2, coap_encode_uint(len(reply.payload))))
        return Reply(reply.code, options, reply.payload[offset : offset + size])


# the empty ACK/RST of a notification, packed directly (a third of coap_encode's cost on the CON event path)
_EMPTY_REPLY = struct.Struct(">BBH").pack
_EMPTY_ACK = 0x40 | codes.ACK << 4
_EMPTY_RST = 0x40 | codes.RST << 4

# stands in for the "response" of a confirmable notification, which has only an ACK
_ACKED: CoapMessage = coap_decode(bytes([0x60, 0x00, 0x00, 0x00]))


def option_values(options: Sequence[tuple[int, bytes]], number: int) -> list[bytes]:
    return [value for n, value in options if n == number]


def _size_hint(response: CoapMessage) -> int | None:
    """The block SZX a 4.13 asks for: its Block1 preference (RFC 7959 §2.9.3), else its Size1, the largest
    body the device takes in one message (RFC 7252 §5.10.9); None without either."""
    block1 = response.block1
    if block1 is not None:
        return block1[2]
    size1 = option_values(response.options, codes.SIZE1)
    if size1 and int.from_bytes(size1[0], "big") >= MIN_BLOCK_SIZE:
        return block_szx(int.from_bytes(size1[0], "big"))
    return None


def option_fault(message: CoapMessage) -> str | None:
    """Why this message's options cannot be acted on (RFC 7252 §5.4.1), or None: an unrecognised critical option
    (the codec knows which it acts on, and finds the first without building the option list here).

    A value of the wrong length or a reserved block size in an option the codec pre-parses (Observe,
    Content-Format, Accept, Block1, Block2) never gets here: `coap_decode` refuses the datagram (a format error)."""
    number = message.unrecognised_critical
    return None if number is None else f"unrecognised critical option {number}"
