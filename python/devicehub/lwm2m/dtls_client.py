"""The client side of CoAPs (issue 13 #7): one DTLS 1.2 session to one server, under a `CoapEndpoint`.

Used by the simulator and Edge Core. `DtlsClient.bind` binds a UDP socket and hands the endpoint a transport that
encrypts each datagram for the server; `handshake()` runs a handshake (PSK or a client certificate; the
server's certificate is not checked — the simulator is a test tool), again whenever the session is gone (the
server restarted, swept or revoked it: the device's register timed out). The engine is the DTLS server's, OpenSSL
from Rust in connect state (`devicehub._core.DtlsConnector`, rust/io/src/tls/client.rs; issue 29 #7), on memory
datagram pipes: a flight that gets no answer is sent again when the retransmission timer runs out (RFC 6347
§4.2.4: 1 s, doubled each time; OpenSSL keeps the timer, `DtlsSession.timeout` says when it is due), and a
handshake not over within `attempts` × HANDSHAKE_STEP_TIMEOUT seconds fails. Each handshake after the first offers
the last established session, with the ticket the server gave (RFC 5077; issue 31 #5): a server that still opens it
(any node of a cluster sharing the ticket keys, or the same node after a restart) answers with the abbreviated
handshake; one that does not, with a full one. A handshake that fails forgets the session offered.
The credentials (`ClientCredentials`, `client_credentials`) are in lwm2m/security.py: TLS over TCP uses them too.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, cast

from devicehub._core import DtlsConnector, DtlsSession
from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceTimeout
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.security import ClientCredentials

HANDSHAKE_STEP_TIMEOUT = 2.0
ATTEMPTS = 4
FIRST_RETRANSMISSION = 1.0  # RFC 6347 §4.2.4.1: the initial timer, should OpenSSL report none


@functools.cache
def _connector() -> DtlsConnector:
    """One per process: its OpenSSL contexts cost about as much to build as a handshake; each session brings its
    own credential."""
    return DtlsConnector()


class _ClientTransport:
    def __init__(self, client: DtlsClient) -> None:
        self._client = client

    def sendto(self, data: bytes, addr: Address) -> None:
        self._client.send(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._client.get_extra_info(name, default)

    def close(self) -> None:
        self._client.close()


class DtlsClient(asyncio.DatagramProtocol):
    """One DTLS session from a local UDP socket to `server`, feeding `endpoint`."""

    def __init__(self, clock: Clock, endpoint: CoapEndpoint, server: Address, credentials: ClientCredentials) -> None:
        self._clock = clock
        self._endpoint = endpoint
        self._server = server
        self._credential = credentials.engine_options()  # read once: the certificate files are not read per handshake
        self._session: DtlsSession | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._progress = asyncio.Event()
        self._resumable: bytes | None = None  # the last established session, offered by the next handshake
        self.handshakes = 0  # handshakes begun on this socket
        self.resumed = 0  # of them, abbreviated ones (the server resumed the session offered)

    @classmethod
    async def bind(
        cls, host: str, clock: Clock, endpoint: CoapEndpoint, server: Address, credentials: ClientCredentials
    ) -> DtlsClient:
        """The socket and the endpoint's transport, no session yet: `handshake()` makes one."""
        loop = asyncio.get_running_loop()
        _, client = await loop.create_datagram_endpoint(
            lambda: cls(clock, endpoint, server, credentials), local_addr=(host, 0)
        )
        endpoint.connection_made(cast(asyncio.DatagramTransport, _ClientTransport(client)))
        return client

    @classmethod
    async def connect(
        cls,
        host: str,
        clock: Clock,
        endpoint: CoapEndpoint,
        server: Address,
        credentials: ClientCredentials,
        *,
        attempts: int = ATTEMPTS,
    ) -> DtlsClient:
        client = await cls.bind(host, clock, endpoint, server, credentials)
        try:
            await client.handshake(attempts)
        except BaseException:
            client.close()
            raise
        return client

    @property
    def established(self) -> bool:
        session = self._session
        return session is not None and session.established and not session.closed

    async def handshake(self, attempts: int = ATTEMPTS) -> None:
        """A handshake on a fresh session (a live one is ended first), offering the last one to resume; DeviceTimeout
        when it fails."""
        self.close_session()
        self.handshakes += 1
        offer, self._resumable = self._resumable, None  # kept again only once a handshake succeeds
        session, hello = _connector().connect(**self._credential, session=offer)
        self._session = session
        self._send(hello)
        deadline = self._clock.now() + attempts * HANDSHAKE_STEP_TIMEOUT
        while not session.established:
            if session.failure is not None:
                self._session = None
                raise DeviceTimeout(
                    f"DTLS handshake with {self._server[0]}:{self._server[1]} failed: {session.failure}"
                )
            left = deadline - self._clock.now()
            if left <= 0:
                self._session = None
                raise DeviceTimeout(f"no DTLS handshake with {self._server[0]}:{self._server[1]}")
            timer = session.timeout()
            await self._progress_or(min(left, FIRST_RETRANSMISSION if timer is None else timer))
            if not session.established and session.failure is None and not self._progress.is_set():
                self._send(session.handle_timeout())  # RFC 6347 §4.2.4: the last flight again
        self.resumed += session.session_reused()
        self._resumable = session.resumable()

    async def _progress_or(self, seconds: float) -> None:
        """Waits for a datagram from the server or for `seconds` on the clock, whichever comes first."""
        self._progress.clear()
        timer = asyncio.ensure_future(self._clock.sleep(seconds))
        progress = asyncio.ensure_future(self._progress.wait())
        try:
            await asyncio.wait((timer, progress), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            progress.cancel()

    def close_session(self) -> None:
        """End the session (close_notify) and keep the socket: the next `handshake()` starts another."""
        session, self._session = self._session, None
        if session is not None and session.established:
            self._send(session.shutdown())

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._udp = cast(asyncio.DatagramTransport, transport)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default if self._udp is None else self._udp.get_extra_info(name, default)

    def close(self) -> None:
        if self._udp is not None:
            self.close_session()
            self._udp.close()
            self._udp = None

    def _send(self, datagrams: list[bytes]) -> None:
        if self._udp is not None:
            for datagram in datagrams:
                self._udp.sendto(datagram, self._server)

    def send(self, data: bytes) -> None:
        session = self._session
        if session is None or not self.established:
            raise DeviceTimeout("DTLS session closed")  # the device handshakes again before its next Register
        self._send(session.send(data))

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        session = self._session
        if (addr[0], addr[1]) != self._server or session is None:
            return
        records, output = session.feed(data)  # records only once the handshake is over
        self._send(output)
        self._progress.set()
        for record in records:
            self._endpoint.datagram_received(record, self._server)
