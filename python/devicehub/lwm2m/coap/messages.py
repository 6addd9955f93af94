"""The vocabulary the CoAP layers and their owners share: addresses, options, replies, handlers, counters."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from devicehub._core import CoapMessage

Address = tuple[str, int]
Options = list[tuple[int, bytes]]


@dataclass(frozen=True, slots=True)
class Reply:
    """What a request handler answers."""

    code: int
    options: Options = field(default_factory=list)
    payload: bytes = b""


Handler = Callable[[CoapMessage, bytes, Address], Awaitable[Reply | None]]
# the owner's overload check, asked on the receive path before a request costs a task: a Reply refuses it at once
# (issue 30 #4: a shed Register must cost far less than an admitted one)
Shed = Callable[[CoapMessage], Reply | None]
# True (ACK) / False (RST: no such observation) / None (no answer: unknown for now, so the device's retransmission
# asks again, issue 31 #4) at once, or an awaitable of it when the observation must first be looked up (issue 12 #5:
# another node's or a restarted node's observation is found in the store); the ACK/RST waits for the answer
NotificationAnswer = bool | None
NotificationHandler = Callable[[CoapMessage, Address], "NotificationAnswer | Awaitable[NotificationAnswer]"]
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
    unanswered_notifications: int = 0  # neither ACK nor RST: unknown for now, the retransmission asks again
    lane_taken: int = 0  # of `received`, datagrams the owner's ObserveLane took (notifications, retransmissions)
    block1_refused: int = 0
    block1_expired: int = 0
    rate_limited: int = 0  # requests dropped over their source address's (address, port) rate
    host_rate_limited: int = 0  # requests dropped over their host's rate, all its ports together (issue 28 #5)


def option_values(options: Sequence[tuple[int, bytes]], number: int) -> list[bytes]:
    return [value for n, value in options if n == number]


def option_fault(message: CoapMessage) -> str | None:
    """Why this message's options cannot be acted on (RFC 7252 §5.4.1), or None: an unrecognised critical option
    (the codec knows which it acts on, and finds the first without building the option list here).

    A value of the wrong length or a reserved block size in an option the codec pre-parses (Observe,
    Content-Format, Accept, Block1, Block2) never gets here: `coap_decode` refuses the datagram (a format error)."""
    number = message.unrecognised_critical
    return None if number is None else f"unrecognised critical option {number}"
