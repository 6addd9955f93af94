"""The client role of the exchange (token) layer: requests and notifications sent, their responses matched by token,
block-wise bodies sent and fetched; the layer below (`Transmitter`) puts each message on the wire and says when the
peer has it (a CON's ACK over UDP, at once over TCP)."""

from __future__ import annotations

import os
import random
from typing import Protocol

from devicehub._core import CoapMessage, ObserveLane
from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceTimeout, EndpointClosed
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap import blockwise
from devicehub.lwm2m.coap.exchanges import ACKED, PendingExchange, until_settled
from devicehub.lwm2m.coap.messages import Address, Options, Stats
from devicehub.lwm2m.coap.parameters import MAX_BODY, MIN_BLOCK_SIZE, block_szx


class Transmitter(Protocol):
    """The layer below the requester: the message layer over UDP and DTLS, the framing over TCP and TLS."""

    async def transmit(
        self, exchange: PendingExchange, code: int, options: Options, payload: bytes, timing: tuple[float, int] | None
    ) -> None:
        """Send the exchange's message and return once the peer has it; `timing` = (ACK timeout, retransmissions)
        for a CON over UDP instead of the layer's own."""

    def release(self, exchange: PendingExchange) -> None:
        """The exchange is over: forget what the layer keeps for it."""


class Requester:
    """Outgoing exchanges waiting for a response, by token (`by_token`); `settle` is how the layer below hands a
    response in."""

    def __init__(self, clock: Clock, stats: Stats, below: Transmitter, *, szx: int, response_timeout: float) -> None:
        self._clock = clock
        self._stats = stats
        self.below = below  # swapped for a stream layer over TCP (`CoapEndpoint.carry_over`)
        self._szx = szx  # the block size this endpoint sends
        self._response_timeout = response_timeout
        self._token_prefix = os.urandom(4)
        self._token_counter = random.randrange(1 << 32)
        self.by_token: dict[bytes, PendingExchange] = {}
        # the owner's armed observations: a request sent with one of their tokens disarms it (its answer is ours)
        self.observe_lane: ObserveLane | None = None

    def new_token(self) -> bytes:
        self._token_counter = (self._token_counter + 1) & 0xFFFFFFFF
        return self._token_prefix + self._token_counter.to_bytes(4, "big")

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
            response = await blockwise.send_blocks(
                self.exchange, remote, code, options, payload, self._szx, confirmable, timing
            )
        else:
            response = await self.exchange(
                remote, code, options, payload, confirmable, token, expect_response=True, timing=timing
            )
            if response.code == codes.ENTITY_TOO_LARGE and len(payload) > MIN_BLOCK_SIZE:
                szx = blockwise.size_hint(response)
                if szx is None:
                    szx = block_szx(len(payload) - 1)  # no hint: the next smaller size that splits the body
                if 1 << (szx + 4) < len(payload):
                    response = await blockwise.send_blocks(
                        self.exchange, remote, code, options, payload, szx, confirmable, timing
                    )
        block2 = response.block2
        if block2 is None or not block2[1]:
            return response
        return await self.complete_block2(remote, code, options, response, confirmable=confirmable)

    async def complete_block2(
        self, remote: Address, code: int, options: Options, first: CoapMessage, *, confirmable: bool = True
    ) -> CoapMessage:
        """Fetch the blocks after `first` (a response or notification whose Block2 has M set) and join them
        (blockwise.complete_block2)."""
        return await blockwise.complete_block2(self.exchange, remote, code, options, first, confirmable)

    async def exchange(
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
        """One message out and, `expect_response`, its response in (piggy-backed or separate, by token); without,
        the confirmable message's ACK stands for it."""
        token = self.new_token() if token is None else token
        exchange = PendingExchange(remote, token, 0, confirmable, expect_response)
        if expect_response:
            self.by_token[token] = exchange
            if self.observe_lane is not None:
                self.observe_lane.disarm_token(remote, token)
        try:
            await self.below.transmit(exchange, code, options, payload, timing)
            if not expect_response:
                return exchange.done.result() if exchange.done.done() else ACKED
            if not exchange.done.done():
                await until_settled(self._clock, exchange, self._response_timeout, or_acked=False)
            if not exchange.done.done():
                self._stats.timeouts += 1
                raise DeviceTimeout(f"no response from {remote[0]}:{remote[1]}")
            return exchange.done.result()
        finally:
            self.below.release(exchange)
            if self.by_token.get(token) is exchange:
                del self.by_token[token]

    def settle(self, message: CoapMessage, remote: Address, error: Exception | None = None) -> bool:
        """A response for one of our exchanges (its token, from its peer, not yet answered) completes it, or fails
        it with `error` (a response we cannot understand); False when no exchange waits for it (a notification, or
        an unknown token)."""
        exchange = self.by_token.get(message.token)
        if exchange is None or exchange.remote != remote or exchange.done.done():
            return False
        if error is not None:
            exchange.done.set_exception(error)
            return True
        exchange.acked.set()
        exchange.done.set_result(message)
        return True

    def close(self) -> None:
        """The layer below is gone: every exchange still waiting fails at once."""
        for exchange in list(self.by_token.values()):
            if not exchange.done.done():
                exchange.done.set_exception(EndpointClosed("endpoint closed"))
