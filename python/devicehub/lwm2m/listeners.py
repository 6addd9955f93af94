"""The LwM2M server's listeners: the CoAP endpoints over UDP, DTLS, TCP and TLS, their lifecycle and figures."""

from __future__ import annotations

from collections.abc import Awaitable
from functools import partial
from typing import Any, Protocol

from devicehub._core import CoapMessage, ObserveLane
from devicehub.clock import Clock
from devicehub.domain.device_results import NotConnected, NotRegistered
from devicehub.domain.model import Registration
from devicehub.domain.registration import TCP, UDP
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import (
    Address,
    Handler,
    LaneHandler,
    NotificationAnswer,
    NotificationHandler,
    Reply,
    Shed,
)
from devicehub.lwm2m.coap.parameters import EXCHANGE_LIFETIME, MAX_DATAGRAM, Limits
from devicehub.lwm2m.dtls import DtlsListener
from devicehub.lwm2m.security import PeerIdentity, identity_of
from devicehub.lwm2m.server_stats import vars_of
from devicehub.lwm2m.tcp import StreamListener
from devicehub.lwm2m.tls_stream import TlsAcceptor
from devicehub.lwm2m.udp import RECV_BATCHES, open_udp


class RequestHandler(Protocol):
    """A request from a peer, with its transport; over (D)TLS `remote` carries the identity the peer's session
    proved (security.AuthenticatedAddress)."""

    def __call__(
        self, message: CoapMessage, payload: bytes, remote: Address, transport: str
    ) -> Awaitable[Reply | None]: ...


class IdentifiedNotificationHandler(Protocol):
    """A notification, with its transport; over (D)TLS `remote` carries the identity the peer's session proved."""

    def __call__(
        self, message: CoapMessage, remote: Address, transport: str
    ) -> NotificationAnswer | Awaitable[NotificationAnswer]: ...


class Listeners:
    """Every endpoint has the server's limits, is swept by the expiry timer and is in the metrics under its
    transport's prefix (`coap`, `coaps`, `coap_tcp`, `coaps_tcp`); the plain and DTLS ones have an observe lane."""

    def __init__(
        self,
        clock: Clock,
        limits: Limits,
        lanes: list[ObserveLane],
        *,
        allow_nosec: bool = True,
    ) -> None:
        self._clock = clock
        self._limits = limits
        self._lanes = lanes  # the registry's: it disarms them as its tables change
        self._allow_nosec = allow_nosec
        self.plain: CoapEndpoint | None = None
        self.secure: CoapEndpoint | None = None
        self.dtls: DtlsListener | None = None
        self.streams: list[StreamListener] = []  # CoAP over TCP and over TLS (RFC 8323, issue 13 #5)
        self._coaps_tcp: StreamListener | None = None
        self.endpoints: list[tuple[str, CoapEndpoint]] = []  # every endpoint, with its transport

    def route(
        self,
        on_request: RequestHandler,
        on_notification: IdentifiedNotificationHandler,
        on_lane_values: LaneHandler,
        shed: Shed | None = None,
    ) -> None:
        """Where the listeners started after this hand their requests, notifications and lane values; `shed` is
        asked first of every request, on the receive path (the registration handler's overload check)."""
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_lane_values = on_lane_values
        self._shed = shed

    def _new_endpoint(
        self, transport: str, on_request: Handler, on_notification: NotificationHandler, *, secure: bool
    ) -> CoapEndpoint:
        # plain CoAP where the service requires (D)TLS is refused 4.03 by the handler, never told to come back
        shed = self._shed if secure or self._allow_nosec else None
        endpoint = CoapEndpoint(self._clock, on_request, on_notification, limits=self._limits, shed=shed)
        self.endpoints.append((transport, endpoint))
        return endpoint

    def _add_lane(self, endpoint: CoapEndpoint) -> None:
        lane = ObserveLane(self._limits.dedup_entries, EXCHANGE_LIFETIME, MAX_DATAGRAM)
        endpoint.attach_lane(lane, self._on_lane_values)
        self._lanes.append(lane)

    async def start(self, host: str, port: int) -> None:
        endpoint = self._new_endpoint(  # UDP is their default transport
            "coap",
            partial(self._on_request, transport=UDP),
            partial(self._on_notification, transport=UDP),
            secure=False,
        )
        if RECV_BATCHES and self._allow_nosec:  # the lane runs in the batch reader; plain CoAP only where allowed
            self._add_lane(endpoint)
        await open_udp(endpoint, host, port)  # recvmmsg batches on Linux (issue 15 #2)
        self.plain = endpoint

    async def start_secure(self, host: str, port: int, certificate: tuple[bytes, bytes], **options: Any) -> None:
        """The CoAPs listener (issue 13 #1); its decrypted datagrams reach the same handlers, from an address with an
        identity."""
        endpoint = self._new_endpoint("coaps", *self._identified(UDP), secure=True)
        self._add_lane(endpoint)  # offered each session's decrypted records
        self.dtls = await DtlsListener.bind(host, port, self._clock, endpoint, certificate=certificate, **options)
        self.secure = endpoint

    async def start_tcp(self, host: str, port: int) -> StreamListener:
        """A CoAP-over-TCP listener (issue 13 #5): its frames reach the same handlers; plain TCP is plain CoAP."""
        endpoint = self._new_endpoint(
            "coap_tcp",
            partial(self._on_request, transport=TCP),
            partial(self._on_notification, transport=TCP),
            secure=False,
        )
        listener = StreamListener(endpoint)
        await listener.start(host, port)
        self.streams.append(listener)
        return listener

    async def start_secure_tcp(
        self, host: str, port: int, certificate: tuple[bytes, bytes], **options: Any
    ) -> StreamListener:
        """The CoAP-over-TLS listener (`coaps+tcp://`, issue 13 #5): its frames reach the same handlers, with the
        identity the TLS handshake proved, under the DTLS listener's rules."""
        endpoint = self._new_endpoint("coaps_tcp", *self._identified(TCP), secure=True)
        listener = StreamListener(endpoint, tls=TlsAcceptor(self._clock, certificate, **options))
        await listener.start(host, port)
        self._coaps_tcp = listener
        self.streams.append(listener)
        return listener

    @property
    def coaps_tcp(self) -> TlsAcceptor | None:
        """The TLS side of the `coaps+tcp://` listener: its keyring, bounds and figures."""
        return None if self._coaps_tcp is None else self._coaps_tcp.tls

    def has_psk(self, endpoint_name: str) -> bool:
        """Does a listener's keyring hold a PSK for this name (both listeners are given the same keyring)?"""
        listener = self.dtls or self.coaps_tcp
        return listener is not None and listener.has_psk(endpoint_name)

    def _identified(self, transport: str) -> tuple[Handler, NotificationHandler]:
        """The handlers of a (D)TLS endpoint: a message whose remote carries no identity (which its listener never
        hands up) is not acted on."""

        async def handle(message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
            if identity_of(remote) is None:
                return Reply(codes.UNAUTHORIZED)
            return await self._on_request(message, payload, remote, transport)

        def notification(message: CoapMessage, remote: Address) -> NotificationAnswer | Awaitable[NotificationAnswer]:
            return False if identity_of(remote) is None else self._on_notification(message, remote, transport)

        return handle, notification

    def endpoint_for(self, registration: Registration) -> CoapEndpoint:
        if registration.transport == TCP:
            return self._connection_endpoint(registration)
        endpoint = self.secure if registration.secure else self.plain
        if endpoint is None:
            raise NotRegistered("server stopped")
        return endpoint

    def lane_for(self, identity: PeerIdentity | None) -> ObserveLane | None:
        """The observe lane of the UDP listener a message came over: plain (no `identity`) or DTLS."""
        endpoint = self.plain if identity is None else self.secure
        return None if endpoint is None else endpoint.observe_lane

    def _connection_endpoint(self, registration: Registration) -> CoapEndpoint:
        """The endpoint of the listener holding the device's connection, plain or TLS as it registered.

        RFC 8323 §3 and LwM2M 1.1 Transport §6.4: over TCP the server reaches the device only on the connection
        the device opened. Once that is closed (or this node restarted) the device is not connected until it
        connects again and sends Register or Update; a datagram to its TCP address would reach no one and wait
        out the whole CoAP retransmission schedule."""
        stream = self._live_stream(registration)
        if stream is not None:
            return stream.endpoint
        raise NotConnected(f"device {registration.device_id} registered over TCP has no open connection")

    def _live_stream(self, registration: Registration) -> StreamListener | None:
        """The TCP (or TLS) listener holding an open connection from the registration's address, if any."""
        for stream in self.streams:
            if stream.secure == registration.secure and stream.connected(registration.address):
                return stream
        return None

    def connected(self, registration: Registration) -> bool:
        return registration.transport != TCP or self._live_stream(registration) is not None

    def sweep(self) -> None:
        for _, endpoint in self.endpoints:
            endpoint.sweep()  # issue 14 #4: what a flood left behind goes, even when nothing follows

    async def close(self) -> None:
        if self.plain is not None:
            await self.plain.close()
        if self.dtls is not None:
            await self.dtls.close()
        for stream in self.streams:
            await stream.close()

    def metrics(self, values: dict[str, float]) -> None:
        """Add each endpoint's and listener's figures to `values`."""
        for transport, endpoint in self.endpoints:  # of several TCP listeners, the figures are summed
            for name, value in [*vars_of(endpoint.stats).items(), *endpoint.table_sizes().items()]:
                key = f"{transport}_{name}"
                values[key] = values.get(key, 0) + value

    def socket_metrics(self, values: dict[str, float]) -> None:
        """Add the UDP sockets' drops and the (D)TLS listeners' figures to `values`."""
        for transport, endpoint in self.endpoints:
            if transport in ("coap", "coaps"):  # the UDP listeners: what their sockets' buffers could not take
                values[f"{transport}_receive_drops"] = endpoint.receive_drops()
        if self.dtls is not None:
            values["dtls_sessions"] = self.dtls.session_count()
            for name, value in vars_of(self.dtls.stats).items():
                values[f"dtls_{name}"] = value
        if (tls := self.coaps_tcp) is not None:
            values["coaps_tcp_connections"] = tls.connection_count()
            for name, value in vars_of(tls.stats).items():
                values[f"coaps_tcp_{name}"] = value
