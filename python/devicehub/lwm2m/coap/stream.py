"""The layer under the token layer over a reliable byte stream (CoAP over TCP and TLS, RFC 8323): messages go to and
come from the peer's connection as they are, with no message IDs, no CON/ACK, no retransmission and no
de-duplication (§2.2: the connection is the reliability); what the UDP message layer does is not done at all."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Protocol

from devicehub._core import CoapMessage
from devicehub.domain.device_results import DeviceProtocolError, DeviceReset
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.exchanges import PendingExchange
from devicehub.lwm2m.coap.messages import (
    Address,
    NotificationAnswer,
    NotificationHandler,
    Options,
    Reply,
    Stats,
    option_fault,
)
from devicehub.lwm2m.coap.requester import Requester
from devicehub.lwm2m.coap.responder import Responder

log = logging.getLogger("devicehub.coap")


class StreamCarrier(Protocol):
    """The connections (lwm2m/tcp.py): each message becomes a frame on its peer's connection."""

    def send_message(self, remote: Address, code: int, token: bytes, options: Options, payload: bytes) -> bool:
        """Write the message to `remote`'s connection; False when there is none open."""

    def close(self) -> None:
        """End every connection."""


class StreamLayer:
    """The requester's and the responder's layer below over a `StreamCarrier`, and the way in for the messages the
    connections decode (`message_received`)."""

    def __init__(
        self,
        carrier: StreamCarrier,
        requester: Requester,
        responder: Responder,
        on_notification: NotificationHandler | None,
        stats: Stats,
    ) -> None:
        self.carrier = carrier
        self._requester = requester
        self._responder = responder
        self._on_notification = on_notification
        self._stats = stats
        self.tasks: set[asyncio.Task[None]] = set()

    async def transmit(
        self, exchange: PendingExchange, code: int, options: Options, payload: bytes, timing: tuple[float, int] | None
    ) -> None:
        """Written to the connection, the message is the peer's (TCP delivers it or the connection ends)."""
        remote = exchange.remote
        if not self.carrier.send_message(remote, code, exchange.token, options, payload):
            self._stats.resets += 1
            raise DeviceReset(f"no connection to {remote[0]}:{remote[1]}")
        self._stats.sent += 1

    def send_non(self, remote: Address, code: int, token: bytes, options: Options, payload: bytes) -> None:
        """A message nothing waits for (a non-confirmable notification): dropped with a connection gone."""
        if self.carrier.send_message(remote, code, token, options, payload):
            self._stats.sent += 1

    def release(self, exchange: PendingExchange) -> None:
        pass  # nothing is kept below the token layer

    def respond(self, request: CoapMessage, remote: Address, reply: Reply) -> None:
        """§3.3: a response carries its request's token; a connection gone meanwhile takes it with it."""
        if self.carrier.send_message(remote, reply.code, request.token, reply.options, reply.payload):
            self._stats.sent += 1

    def message_received(self, message: CoapMessage, remote: Address) -> None:
        """A request or a response from `remote`'s connection (signals and empty messages stay with it)."""
        self._stats.received += 1
        code = message.code
        fault = option_fault(message)
        if codes.is_request(code):
            self._responder.incoming(message, remote, fault)
        elif codes.is_response(code):
            self._response(message, remote, fault)
        else:
            self._stats.malformed += 1

    def _response(self, message: CoapMessage, remote: Address, fault: str | None) -> None:
        if fault is not None:  # RFC 7252 §5.4.1: a response we cannot understand is rejected
            self._stats.rejected += 1
            error = DeviceProtocolError(f"{remote[0]}:{remote[1]} answered with {fault}")
            self._requester.settle(message, remote, error)
            return
        if self._requester.settle(message, remote):
            return
        if self._on_notification is None:
            self._stats.unknown_notifications += 1
            return
        self._stats.notifications += 1
        answer = self._on_notification(message, remote)
        if answer is None or isinstance(answer, bool):
            self._stats.unknown_notifications += answer is False
            return
        task = asyncio.ensure_future(self._await_notification(remote, answer))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _await_notification(self, remote: Address, answer: Awaitable[NotificationAnswer]) -> None:
        """No ACK or RST to send over a stream (§2.2): the answer is only counted."""
        try:
            accepted = await answer
        except Exception:
            log.exception("notification handler failed for %s:%d", remote[0], remote[1])
            accepted = None
        self._stats.unknown_notifications += accepted is False
