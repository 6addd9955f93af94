"""The server role of the exchange layer: a request checked (source rate, critical options, proxying, size), its
Block1 parts reassembled, handed to the owner's handler, and its reply (Block2-served) given to the layer below."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.clock import Clock
from devicehub.errors import Unavailable
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap import blockwise
from devicehub.lwm2m.coap.messages import Address, Handler, Reply, Shed, Stats
from devicehub.lwm2m.coap.parameters import UNAVAILABLE_LOG_S, UNAVAILABLE_RETRY_S, Limits
from devicehub.outages import unavailable
from devicehub.ratelimit import SourceLimits

log = logging.getLogger("devicehub.coap")

# how the layer below sends a reply to a request: piggy-backed or NON over UDP, a frame over TCP
Respond = Callable[[CoapMessage, Address, Reply], None]


class Responder:
    """Answers the requests the layer below hands up; the handlers run as tasks (`tasks`, cancelled on close)."""

    def __init__(
        self,
        clock: Clock,
        on_request: Handler,
        respond: Respond,
        stats: Stats,
        *,
        szx: int,
        max_payload: int | None,
        limits: Limits,
        shed: Shed | None = None,
    ) -> None:
        self._clock = clock
        self._on_request = on_request
        self._shed = shed
        self._respond = respond
        # over a stream every request is answered (RFC 8323 §3.3); over UDP a NON one with a fault is not (§4.3)
        self._answer_faults_always = False
        self._stats = stats
        # the block size this endpoint prefers to receive (Block1 in 2.31 answers) and serves (Block2)
        self._szx = szx
        # the largest request payload one message may carry here: above it, 4.13 with Size1 (RFC 7959 §2.9.3)
        self._max_payload = max_payload
        self.uploads = blockwise.Uploads(clock, limits, stats)
        self.rates = SourceLimits(
            clock,
            (limits.requests_per_second, limits.request_burst),
            (limits.host_requests_per_second, limits.host_request_burst),
        )
        self.tasks: set[asyncio.Task[None]] = set()
        self._said_unavailable_at = float("-inf")

    def incoming(self, message: CoapMessage, remote: Address, fault: str | None) -> bool:
        """Take a (de-duplicated) request; False when it was dropped unanswered over its source's rate, so that
        the layer below forgets it and takes the device's retransmission once the bucket has refilled."""
        if (cause := self.rates.take(*remote)) is not None:
            # over its address's or its host's rate: dropped unanswered (an answer would feed the flood)
            if cause == "address":
                self._stats.rate_limited += 1
            else:
                self._stats.host_rate_limited += 1
            return False
        if fault is not None:
            self._stats.rejected += 1
            if message.mtype == codes.CON or self._answer_faults_always:  # §5.4.1; a NON one is ignored (§4.3)
                self.reply(message, remote, Reply(codes.BAD_OPTION, payload=fault.encode()[:100]))
            return True
        if message.has_option(codes.PROXY_URI) or message.has_option(codes.PROXY_SCHEME):
            self.reply(message, remote, Reply(codes.PROXYING_NOT_SUPPORTED))  # §5.7.2: this is no proxy
            return True
        if self._shed is not None and (refusal := self._shed(message)) is not None:
            self.reply(message, remote, refusal)  # before reassembly and before a task: shedding stays cheap
            return True
        block1 = message.block1
        if self._max_payload is not None and len(message.payload) > self._max_payload:
            self.reply(message, remote, blockwise.too_large(self._max_payload, block1))
            return True
        if block1 is not None:
            assembled = self.uploads.take(message, remote, block1, self._szx)
            if isinstance(assembled, Reply):  # 2.31 for more to come, or the refusal
                self.reply(message, remote, assembled)
                return True
            payload = assembled
        else:
            payload = message.payload
        task = asyncio.ensure_future(self._answer(message, payload, remote))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

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
            self.reply(message, remote, reply)

    def _say_unavailable(self, error: Exception) -> None:
        """Counted each time; said once a minute (the SQLite store says its own outage: only the rest is said here)."""
        self._stats.store_unavailable += 1
        now = self._clock.now()
        if not isinstance(error, Unavailable) and now - self._said_unavailable_at >= UNAVAILABLE_LOG_S:
            self._said_unavailable_at = now
            log.warning(
                "requests answered 5.03: the store does not answer (%s); %d so far",
                error,
                self._stats.store_unavailable,
            )

    def respond_over_stream(self, respond: Respond) -> None:
        """The layer below is a reliable stream (RFC 8323): replies go through `respond`, every request answered."""
        self._respond = respond
        self._answer_faults_always = True

    def reply(self, message: CoapMessage, remote: Address, reply: Reply) -> None:
        """Answer `message`: a success body larger than a block is served block by block (RFC 7959 §2.4)."""
        if reply.code >> 5 == 2 and reply.code != codes.CONTINUE:
            reply = blockwise.serve_block2(message, reply, self._szx)
        self._respond(message, remote, reply)

    def sweep(self, now: float) -> None:
        self.uploads.prune(now)
        self.rates.sweep()
