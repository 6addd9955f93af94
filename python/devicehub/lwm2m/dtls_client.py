"""The client side of CoAPs (issue 13 #7): one DTLS 1.2 session to one server, under a `CoapEndpoint`.

Used by the simulator and Edge Core. `DtlsClient.bind` binds a UDP socket and hands the endpoint a transport that
encrypts each datagram for the server; `handshake()` runs a full handshake (PSK or a client certificate; the
server's certificate is not checked — the simulator is a test tool), again whenever the session is gone (the
server restarted, swept or revoked it: the device's register timed out). A handshake that stalls is started over,
up to `attempts` times (python-mbedtls buffers have no retransmission timer). Sessions are not resumed:
python-mbedtls 2.10 can neither give a session to a new connection (its `TLSSession` has no methods,
`mbedtls_ssl_set_session` is never called) nor would its server side resume one (no session cache or tickets
configured); bench/README.md "DTLS session resumption" has the source lines and what a full handshake costs.
The credentials (`ClientCredentials`, `client_credentials`) are in lwm2m/security.py: TLS over TCP uses them too.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from mbedtls import tls
from mbedtls.exceptions import TLSError

from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceTimeout
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.security import MAX_RECORD, ClientCredentials, step_handshake

HANDSHAKE_STEP_TIMEOUT = 2.0
ATTEMPTS = 4


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
        self._context = tls.ClientContext(credentials.configuration())
        self._buffer = self._context.wrap_buffers(None)
        self._udp: asyncio.DatagramTransport | None = None
        self._progress = asyncio.Event()
        self._established = False
        self._failure: Exception | None = None
        self.handshakes = 0  # full handshakes begun on this socket

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
        return self._established

    async def handshake(self, attempts: int = ATTEMPTS) -> None:
        """A full handshake on a fresh session (a live one is ended first); DeviceTimeout when it fails."""
        if self._established:
            self.close_session()
        self._failure = None
        self._buffer = self._context.wrap_buffers(None)
        self.handshakes += 1
        await self._handshake(attempts)

    def close_session(self) -> None:
        """End the session (close_notify) and keep the socket: the next `handshake()` starts another."""
        if self._established:
            self._established = False
            try:
                self._buffer.shutdown()
            except TLSError:
                pass
            self._flush()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._udp = cast(asyncio.DatagramTransport, transport)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default if self._udp is None else self._udp.get_extra_info(name, default)

    def close(self) -> None:
        if self._udp is not None:
            self.close_session()
            self._udp.close()
            self._udp = None

    async def _handshake(self, attempts: int) -> None:
        for _ in range(attempts):
            self._step()
            while not self._established and self._failure is None:
                self._progress.clear()
                timer = asyncio.ensure_future(self._clock.sleep(HANDSHAKE_STEP_TIMEOUT))
                progress = asyncio.ensure_future(self._progress.wait())
                try:
                    await asyncio.wait((timer, progress), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    timer.cancel()
                    progress.cancel()
                if not self._progress.is_set():
                    break  # stalled: start over with a fresh ClientHello
            if self._established:
                return
            if self._failure is not None:
                raise DeviceTimeout(f"DTLS handshake with {self._server[0]}:{self._server[1]} failed: {self._failure}")
            self._buffer = self._context.wrap_buffers(None)
        raise DeviceTimeout(f"no DTLS handshake with {self._server[0]}:{self._server[1]}")

    def _step(self) -> None:
        try:
            if not step_handshake(self._buffer, self._flush):
                return
        except TLSError as error:
            self._failure = error
            self._progress.set()
            return
        self._established = True
        self._progress.set()

    def _flush(self) -> None:
        while self._buffer._output_buffer:
            chunk = self._buffer.peek_outgoing(MAX_RECORD)
            self._buffer.consume_outgoing(len(chunk))
            if self._udp is not None:
                self._udp.sendto(chunk, self._server)

    def send(self, data: bytes) -> None:
        if not self._established:
            raise DeviceTimeout("DTLS session closed")  # the device handshakes again before its next Register
        self._buffer.write(data)
        self._flush()

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if (addr[0], addr[1]) != self._server:
            return
        try:
            self._buffer.receive_from_network(data)
        except TLSError:
            return
        if not self._established:
            self._progress.set()
            self._step()
            if not self._established:
                return
        while True:
            try:
                plain = self._buffer.read(MAX_RECORD)
            except tls.WantReadError:
                return
            except TLSError:  # close_notify or a fatal alert: the session is over
                self._established = False
                return
            if not plain:
                return
            self._endpoint.datagram_received(plain, self._server)
