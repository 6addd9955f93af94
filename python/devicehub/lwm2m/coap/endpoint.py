"""The CoAP message layer over UDP and DTLS (RFC 7252 §4), and the endpoint the LwM2M server and the simulator hold.

What it owns: message IDs, retransmission of confirmable messages with exponential back-off (§4.2), de-duplication
by (remote, message ID) (§4.5, coap/dedup.py), piggy-backed or separate responses (§5.2), RST for what it cannot
take, and sending a loop turn's datagrams together (coap/batching.py). A CON with a format error gets RST (§4.2);
a CON request with an unrecognised critical option gets 4.02 (§5.4.1, coap/responder.py).
Above it: requests and their responses by token (coap/requester.py), the requests it answers (coap/responder.py),
block-wise transfer both ways (coap/blockwise.py). Beside it: the notification lane (an `ObserveLane` that a batch
reader, lwm2m/udp.py, or a DTLS session lets take its notifications before this endpoint decodes them).
What it leaves to its owner: what a request means (`on_request`) and whether an unsolicited response belongs to
an observation (`on_notification`): that is how a device's auto-observe tokens can be adopted and why an unknown
confirmable notification gets RST while an unknown non-confirmable one is ignored (lwm2m-device-side.md §0, §4).
Message encoding and decoding is the Rust codec. Malformed datagrams are counted and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
from collections.abc import Awaitable
from typing import Any, cast

from devicehub._core import CoapError, CoapMessage, ObserveLane, coap_decode, coap_encode
from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceProtocolError, DeviceReset, DeviceTimeout, EndpointClosed
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap import blockwise
from devicehub.lwm2m.coap.batching import SEND_BATCHES, SendBatch
from devicehub.lwm2m.coap.dedup import Deduplicator
from devicehub.lwm2m.coap.exchanges import PendingExchange, retransmission_timeouts, wait_acked
from devicehub.lwm2m.coap.messages import (
    Address,
    Handler,
    LaneHandler,
    LaneNotification,
    NotificationAnswer,
    NotificationHandler,
    Options,
    Reply,
    Shed,
    Stats,
    option_fault,
)
from devicehub.lwm2m.coap.parameters import (
    ACK_TIMEOUT,
    BLOCK_SIZE,
    DEFAULT_LIMITS,
    MAX_DATAGRAM,
    MAX_RETRANSMIT,
    MAX_TRANSMIT_WAIT,
    Limits,
    block_szx,
)
from devicehub.lwm2m.coap.requester import Requester
from devicehub.lwm2m.coap.responder import Responder
from devicehub.lwm2m.coap.sockets import bound_udp_socket, receive_drops
from devicehub.lwm2m.coap.stream import StreamCarrier, StreamLayer

log = logging.getLogger("devicehub.coap")


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
        shed: Shed | None = None,
    ) -> None:
        self._clock = clock
        self._on_notification = on_notification
        self._ack_timeout = ack_timeout
        self._max_retransmit = max_retransmit
        # the block size this endpoint sends and prefers to receive (Block1 in 2.31 answers, Block2 it serves)
        self._szx = block_szx(block_size)
        self._transport: asyncio.DatagramTransport | None = None
        self._next_mid = random.randrange(0x10000)
        # what this endpoint sent and waits for, by (remote, message ID): its ACK or RST (§4.2, §4.3)
        self._by_mid: dict[tuple[Address, int], PendingExchange] = {}
        self.stats = Stats()
        self._requester = Requester(clock, self.stats, self, szx=self._szx, response_timeout=response_timeout)
        self.request = self._requester.request
        # one request and its response, Block2 not followed: a client that fetches blocks itself (the simulator's
        # firmware download resumes at the block it stopped at)
        self.exchange = self._requester.exchange
        self.complete_block2 = self._requester.complete_block2
        self.new_token = self._requester.new_token
        self._seen = Deduplicator(clock, limits.dedup_entries, limits.dedup_bytes)
        self._responder = Responder(
            clock, on_request, self._reply, self.stats, szx=self._szx, max_payload=max_payload, limits=limits, shed=shed
        )
        self._tasks: set[asyncio.Task[None]] = set()  # the notification handlers' that answer later
        # what this loop turn sends, flushed together at its end (issue 15 #2): on a plain UDP socket everything the
        # endpoint sends (answers, requests, retransmissions, ACKs), on other transports the notifications' ACK/RST
        self._batch = SendBatch(self.stats)
        # the owner's armed observations, recognised by a batch reader before this endpoint sees the datagram
        self.observe_lane: ObserveLane | None = None
        self._on_lane: LaneHandler | None = None
        self._stream: StreamLayer | None = None  # below the token layer instead of this one (`carry_over`)

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
        self._batch.transport = self._transport

    def send_in_batches(self) -> None:
        """The transport is a plain UDP socket (not a DTLS or TCP adapter): the datagrams one loop turn sends go out
        in one sendmmsg on its descriptor at the turn's end (Linux). Called by whoever created the socket, right
        after."""
        socket = self._transport.get_extra_info("socket") if self._transport is not None else None
        self._batch.socket_fd = socket.fileno() if SEND_BATCHES and socket is not None else None

    def carry_over(self, carrier: StreamCarrier) -> StreamLayer:
        """Put a reliable stream (CoAP over TCP or TLS, RFC 8323) under the token layer instead of this message
        layer: requests, responses and notifications go as they are, with no message IDs and no CON/ACK. The
        connections hand what they decode to the returned layer's `message_received`."""
        stream = StreamLayer(carrier, self._requester, self._responder, self._on_notification, self.stats)
        self._requester.below = stream
        self._responder.respond_over_stream(stream.respond)
        self._stream = stream
        return stream

    def attach_lane(self, lane: ObserveLane, on_values: LaneHandler) -> None:
        """Let a batch reader (lwm2m/udp.py) recognise `lane`'s notifications: their values go to `on_values`
        with the count of stale ones dropped; a request sent with a token disarms it (its answer is the exchange's)."""
        self.observe_lane = self._requester.observe_lane = lane
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
            self._batch.add_all(acks)
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
        self._batch.transport = None
        self._batch.socket_fd = None
        self._requester.close()

    @property
    def address(self) -> Address:
        assert self._transport is not None
        host, port = self._transport.get_extra_info("sockname")[:2]
        return str(host), int(port)

    @property
    def datagram_socket(self) -> socket.socket | None:
        """The bound socket (None before bind, once closed, or behind a DTLS or TCP adapter without one): what the
        kernel granted it (its receive buffer) and what it dropped, read here for `receive_drops` and by whoever
        checks a listener's buffer (tests of the receive path)."""
        if self._transport is None:
            return None
        return cast("socket.socket | None", self._transport.get_extra_info("socket"))

    async def close(self) -> None:
        stream = self._stream
        tasks = [*self._tasks, *self._responder.tasks, *(() if stream is None else stream.tasks)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if stream is not None:
            stream.carrier.close()
        if self._transport is not None:
            self._batch.flush()  # what this turn sent before closing still goes, as a direct sendto would have
            self._transport.close()
            self._transport = None
            self._batch.transport = None

    # ---- sending ------------------------------------------------------------------------------------
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
        if self._batch.socket_fd is not None:
            self._batch.add(data, remote)
            return
        if self._transport is None:
            raise EndpointClosed("endpoint closed")
        self._transport.sendto(data, remote)
        self.stats.sent += 1

    def error_received(self, exc: Exception) -> None:
        # asyncio reports a failed sendto (or an ICMP error) here, not to the sender: count it, the sender's
        # retransmission window decides the exchange
        self.stats.send_errors += 1
        log.debug("UDP send error: %s", exc)

    async def send_notification(
        self, remote: Address, code: int, token: bytes, options: Options, payload: bytes, *, confirmable: bool
    ) -> None:
        """Send an observation notification; a confirmable one waits for the ACK (DeviceReset on RST).

        A body larger than a block goes as its first Block2 block; the observer fetches the rest (RFC 7959 §3.4)."""
        options, payload = blockwise.first_block2(options, payload, self._szx)
        if not confirmable:
            if self._stream is not None:
                self._stream.send_non(remote, code, token, options, payload)
            else:
                self._send(coap_encode(codes.NON, code, self._mid(), token, options, payload), remote)
            return
        await self._requester.exchange(remote, code, options, payload, True, token, expect_response=False)

    async def transmit(
        self, exchange: PendingExchange, code: int, options: Options, payload: bytes, timing: tuple[float, int] | None
    ) -> None:
        """The message layer under the requester: a fresh message ID, CON retransmitted until ACKed (RFC 7252
        §4.2 back-off, `timing` = (ACK timeout, retransmissions) or the endpoint's) or NON sent once."""
        remote = exchange.remote
        exchange.mid = mid = self._mid()
        confirmable = exchange.confirmable
        data = coap_encode(codes.CON if confirmable else codes.NON, code, mid, exchange.token, options, payload)
        self._by_mid[(remote, mid)] = exchange
        self._send(data, remote)
        if not confirmable:
            return
        timeouts = retransmission_timeouts(*(timing or (self._ack_timeout, self._max_retransmit)))
        last = len(timeouts) - 1
        for attempt, timeout in enumerate(timeouts):
            if await wait_acked(self._clock, exchange, timeout):
                return
            if attempt == last:
                break
            self.stats.retransmissions += 1
            self._send(data, remote)
        self.stats.timeouts += 1
        raise DeviceTimeout(f"no ACK from {remote[0]}:{remote[1]}")

    def release(self, exchange: PendingExchange) -> None:
        self._by_mid.pop((exchange.remote, exchange.mid), None)

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
        # an IPv6 socket's 4-tuple is cut to (host, port); a pair is kept as given: a (D)TLS listener's remote carries
        # the identity its session proved (lwm2m/security.py AuthenticatedAddress)
        remote: Address = addr if len(addr) == 2 else (addr[0], addr[1])
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
        if fault is not None:  # §5.4.1: rejected; a CON one with RST (§4.2)
            self.stats.rejected += 1
            self._requester.settle(
                message, remote, DeviceProtocolError(f"{remote[0]}:{remote[1]} answered with {fault}")
            )
            if message.mtype == codes.CON:
                reply = coap_encode(codes.RST, 0, message.mid, b"", [], b"")
                self._seen.remember(remote, message.mid, reply)
                self._send(reply, remote)
            return
        accepted: NotificationAnswer
        if self._requester.settle(message, remote):
            accepted = True
        elif self._on_notification is not None:
            self.stats.notifications += 1
            answer = self._on_notification(message, remote)
            if answer is not None and not isinstance(answer, bool):
                task = asyncio.ensure_future(self._answer_notification(message, remote, answer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return
            accepted = answer
        else:
            accepted = False
        self._acknowledge_notification(message, remote, accepted)

    async def _answer_notification(
        self, message: CoapMessage, remote: Address, answer: Awaitable[NotificationAnswer]
    ) -> None:
        try:
            accepted = await answer
        except Exception:  # not known to be unwanted: no RST (it would end a stream that may be ours)
            log.exception("notification handler failed for %s:%d", remote[0], remote[1])
            accepted = None
        self._acknowledge_notification(message, remote, accepted)

    def _acknowledge_notification(self, message: CoapMessage, remote: Address, accepted: NotificationAnswer) -> None:
        if accepted is None:
            # issue 31 #4: whether the observation is ours is not known now (its lookup was shed or failed). An RST
            # would end it for good (RFC 7641 §3.6: the device removes the observer), so nothing is sent and the
            # message is forgotten: the device's retransmission (RFC 7252 §4.2) asks again
            self.stats.unanswered_notifications += 1
            self._seen.forget(remote, message.mid)
            return
        if not accepted:
            self.stats.unknown_notifications += 1
        if message.mtype == codes.CON:
            # RFC 7252 §3: version 1, type, no token, code 0.00, the notification's message ID
            reply = _EMPTY_REPLY(_EMPTY_ACK if accepted else _EMPTY_RST, 0, message.mid)
            self._seen.remember(remote, message.mid, reply)
            self._batch.add(reply, remote)

    def _duplicate(self, message: CoapMessage, remote: Address) -> bool:
        """True for a retransmission already seen; the cached reply (if any) is sent again."""
        if self._seen.first(remote, message.mid):
            return False
        self.stats.duplicates += 1
        reply = self._seen.reply_for(remote, message.mid)
        if reply is not None:
            self._send(reply, remote)
        return True

    def sweep(self) -> None:
        """Drop what has outlived EXCHANGE_LIFETIME (de-dup entries, unfinished uploads) even when no datagram
        comes to prune it: the owner calls this from its periodic timer, so memory returns after a flood stops."""
        now = self._clock.now()
        self._seen.prune(now)
        self._responder.sweep(now)
        if self.observe_lane is not None:
            self.observe_lane.prune(now)

    def receive_drops(self) -> int:
        """Datagrams the kernel dropped at this endpoint's UDP socket (its receive buffer was full)."""
        sock = self.datagram_socket
        return 0 if sock is None else receive_drops(sock)

    def table_sizes(self) -> dict[str, int]:
        """Sizes of the per-peer tables (issue 14 #4), for metrics and tests."""
        uploads, rates = self._responder.uploads, self._responder.rates
        return {
            "dedup_entries": len(self._seen),
            "dedup_bytes": self._seen.bytes,
            "block1_transfers": len(uploads),
            "block1_bytes": uploads.bytes,
            "block1_peers": uploads.peers,
            "tasks": len(self._tasks)
            + len(self._responder.tasks)
            + (0 if self._stream is None else len(self._stream.tasks)),
            "rate_buckets": len(rates.addresses),
            "host_rate_buckets": len(rates.hosts),
            **(
                {}
                if self.observe_lane is None
                else {"lane_armed": self.observe_lane.armed, "lane_acked": self.observe_lane.acked}
            ),
        }

    def _incoming_request(self, message: CoapMessage, remote: Address, fault: str | None) -> None:
        if self._duplicate(message, remote):
            return
        if not self._responder.incoming(message, remote, fault):
            self._seen.forget(remote, message.mid)

    def _reply(self, message: CoapMessage, remote: Address, reply: Reply) -> None:
        """RFC 7252 §5.2: piggy-backed on the ACK of a CON request, a NON of its own to a NON one; remembered for
        the request's retransmissions."""
        if message.mtype == codes.CON:
            data = coap_encode(codes.ACK, reply.code, message.mid, message.token, reply.options, reply.payload)
        else:
            data = coap_encode(codes.NON, reply.code, self._mid(), message.token, reply.options, reply.payload)
        self._seen.remember(remote, message.mid, data)
        self._send(data, remote)


# the empty ACK/RST of a notification, packed directly (a third of coap_encode's cost on the CON event path)
_EMPTY_REPLY = struct.Struct(">BBH").pack
_EMPTY_ACK = 0x40 | codes.ACK << 4
_EMPTY_RST = 0x40 | codes.RST << 4
