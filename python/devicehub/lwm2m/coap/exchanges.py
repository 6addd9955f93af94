"""Outgoing exchanges of the token layer: what one sent message waits for (its ACK, its response by token), the RFC
7252 §4.2 retransmission schedule, and the waits themselves on the injected clock."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from devicehub._core import CoapMessage, coap_decode
from devicehub.clock import Clock
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.coap.parameters import ACK_RANDOM_FACTOR

# stands in for the "response" of a confirmable notification, which has only an ACK
ACKED: CoapMessage = coap_decode(bytes([0x60, 0x00, 0x00, 0x00]))


def retransmission_timeouts(ack_timeout: float, max_retransmit: int, spread: float | None = None) -> list[float]:
    """How long each transmission of a CON waits for its ACK (RFC 7252 §4.2): the first ACK_TIMEOUT ×
    [1, ACK_RANDOM_FACTOR] (`spread` in [0, 1] picks where, at random when None), each later one twice the last."""
    spread = random.random() if spread is None else spread
    timeout = ack_timeout * (1.0 + spread * (ACK_RANDOM_FACTOR - 1.0))
    return [timeout * (1 << attempt) for attempt in range(max_retransmit + 1)]


class Acked:
    """asyncio.Event's `set`/`is_set` for one exchange, waking the one wait under way (if any) through a future:
    an Event's `wait()` needs a task of its own to be raced against the timer, and that per exchange was most of
    the wait's cost (issue 15)."""

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
class PendingExchange:
    """One message this endpoint sent: matched by (remote, message ID) for its ACK/RST and, when it expects a
    response, by token for a separate one."""

    remote: Address
    token: bytes
    mid: int  # the message layer's, set as it sends (none over TCP)
    confirmable: bool
    expect_response: bool
    acked: Acked = field(default_factory=Acked)
    done: asyncio.Future[CoapMessage] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


async def wait_acked(clock: Clock, exchange: PendingExchange, timeout: float) -> bool:
    """True once the exchange is ACKed or settled; False when `timeout` (clock seconds) passes first. A settled
    exchange's exception (DeviceReset) is raised."""
    if exchange.acked.is_set() or exchange.done.done():
        return True
    await until_settled(clock, exchange, timeout, or_acked=True)
    if exchange.done.done() and exchange.done.exception() is not None:
        exchange.done.result()  # raises DeviceReset
    return exchange.acked.is_set() or exchange.done.done()


async def until_settled(clock: Clock, exchange: PendingExchange, timeout: float, *, or_acked: bool) -> None:
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
    timer = clock.call_later(timeout, wake)
    try:
        await woken
    finally:
        timer.cancel()
        exchange.done.remove_done_callback(wake)
        if or_acked:
            exchange.acked.waiter = None
