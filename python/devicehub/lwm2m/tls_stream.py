"""TLS over TCP for CoAP (`coaps+tcp://`, RFC 8323 §2, §8.2; issue 13 #5): OpenSSL on memory byte pipes under an
asyncio stream protocol.

The engine is the DTLS listener's, from Rust (`devicehub._core.TlsServer`/`TlsConnector`, rust/io/src/tls.rs,
issue 29 #7: one TLS library), with the same suites, keyring and identity rules (lwm2m/security.py). `TlsStream`
is the protocol of one TCP connection: it feeds what arrives to its `TlsSession`, sends what that gives back, and,
once the peer is authenticated, hands the decrypted byte stream to an inner protocol (the RFC 8323 framing of
lwm2m/tcp.py) through a transport whose peer address (`get_extra_info("peername")`) carries who the peer proved to
be (security.AuthenticatedAddress, as the DTLS listener's remotes do); what the inner protocol writes goes out as
records.

The server side, `TlsAcceptor`, runs at most `max_handshakes` handshakes at once (a connection beyond is closed
at once), ends a handshake not over within `handshake_timeout` seconds (the clock is injected), logs each refused
handshake once with its reason, and ends the connections whose credential a new keyring no longer holds (`load`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from devicehub._core import TlsConnector, TlsServer, TlsSession
from devicehub.clock import Clock
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.handshake_shares import HANDSHAKES_PER_ADDRESS, HANDSHAKES_PER_PREFIX, HandshakeShares, Refusal
from devicehub.lwm2m.security import (
    AuthenticatedAddress,
    ClientCredentials,
    Keyring,
    PeerIdentity,
    authenticate,
    failure_reason,
)

log = logging.getLogger("devicehub.coaps_tcp")

HANDSHAKE_TIMEOUT = 10.0
MAX_HANDSHAKES = 256
SWEEP_INTERVAL = 1.0


@dataclass(slots=True)
class TlsStats:
    handshakes: int = 0
    refused: int = 0
    busy: int = 0
    busy_address: int = 0  # a connection from an address holding its share of handshakes, closed (issue 28 #3)
    busy_prefix: int = 0  # the same for its /24 or /64
    evicted_handshake: int = 0  # a handshake ended to give its slot to a source under its share
    handshake_timeouts: int = 0
    revoked: int = 0


class _Plain(asyncio.Transport):
    """What the inner protocol writes to and closes: the plaintext face of one `TlsStream`."""

    def __init__(self, stream: TlsStream, extra: dict[str, Any]) -> None:
        super().__init__(extra)
        self._stream = stream

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._stream.send(bytes(data))

    def is_closing(self) -> bool:
        return self._stream.closing

    def close(self) -> None:
        self._stream.close()

    def abort(self) -> None:
        self._stream.abort()


class TlsStream(asyncio.Protocol):
    """One TLS connection over TCP; server side with an `acceptor`, client side without (then `ready` tells)."""

    def __init__(self, session: TlsSession, inner: asyncio.Protocol, acceptor: TlsAcceptor | None = None) -> None:
        self._session = session
        self._inner = inner
        self._acceptor = acceptor
        self._transport: asyncio.Transport | None = None
        self._plain: _Plain | None = None  # set once the peer is authenticated
        self.peer: Address = ("", 0)
        self.identity: PeerIdentity | None = None
        self.psk_identity: str | None = None
        self.started_at = 0.0
        self.ready: asyncio.Future[None] | None = None if acceptor else asyncio.get_running_loop().create_future()

    # ---- the TCP side ---------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a cast, not an isinstance check: uvloop's TCPTransport (what `serve` runs on) has the methods of
        # asyncio.Transport without deriving from it (issue 28 #2: the check failed every connection)
        self._transport = cast(asyncio.Transport, transport)
        host, port = transport.get_extra_info("peername")[:2]
        self.peer = (str(host), int(port))
        if self._acceptor is None:
            self._write(self._session.start())  # the client speaks first: ClientHello
        elif not self._acceptor.admit(self):
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._acceptor is not None:
            self._acceptor.lost(self)
        if self.ready is not None and not self.ready.done():
            self.ready.set_exception(ConnectionError(f"TLS connection to {self.peer[0]}:{self.peer[1]} closed"))
        if self._plain is not None:
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        session = self._session
        plaintext, output = session.feed(data)
        self._write(output)
        if self._plain is None:
            if session.established:
                self._handshake_over()
            elif session.failure is not None:
                self._handshake_failed(session.failure)
                return
        if plaintext and self._plain is not None and not self.closing:
            self._inner.data_received(plaintext)
        if session.closed:  # close_notify (answered), a fatal alert or a record that did not decrypt
            self.abort()

    @property
    def closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    # ---- the handshake --------------------------------------------------------------------------------
    def _handshake_failed(self, failure: str) -> None:
        """The alert is sent; the connection ends."""
        self.psk_identity = self._session.psk_identity
        acceptor = self._acceptor
        if acceptor is not None:
            acceptor.refuse(self, failure_reason(failure, self.psk_identity, acceptor.keyring))
        elif self.ready is not None and not self.ready.done():
            self.ready.set_exception(ConnectionError(f"TLS handshake failed: {failure}"))
        self.abort()

    def _handshake_over(self) -> None:
        session = self._session
        self.psk_identity = session.psk_identity
        acceptor = self._acceptor
        if acceptor is not None:
            identity, reason = authenticate(
                self.psk_identity, session.peer_certificate, acceptor.keyring, acceptor.now()
            )
            if identity is None:
                acceptor.refuse(self, reason)
                self.close()
                return
            self.identity = identity
            acceptor.established(self)
        assert self._transport is not None
        cipher = session.cipher
        peername = self._transport.get_extra_info("peername")
        if self.identity is not None:  # the server side: every message's remote says who the peer proved to be
            peername = AuthenticatedAddress(str(peername[0]), int(peername[1]), self.identity)
        extra = {
            "peername": peername,
            "sockname": self._transport.get_extra_info("sockname"),
            "cipher": None if cipher is None else cipher.replace("_", "-"),  # as lwm2m/dtls.py names it
        }
        self._plain = _Plain(self, extra)
        self._inner.connection_made(self._plain)
        if self.ready is not None and not self.ready.done():
            self.ready.set_result(None)

    # ---- records ---------------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        if self._plain is None or self.closing:
            return
        self._write(self._session.send(data))
        if self._session.closed:
            self.abort()

    def _write(self, output: bytes) -> None:
        if output and self._transport is not None:
            self._transport.write(output)

    # ---- ending ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """close_notify, then close the TCP connection once what is written has gone."""
        if self.closing:
            return
        if self._plain is not None:
            self._write(self._session.shutdown())
        assert self._transport is not None
        self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class TlsAcceptor:
    """The server side of `coaps+tcp://`: its OpenSSL context, keyring and bounds; see the module docstring."""

    def __init__(
        self,
        clock: Clock,
        certificate: tuple[bytes, bytes],
        *,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        max_handshakes: int = MAX_HANDSHAKES,
        handshakes_per_address: int = HANDSHAKES_PER_ADDRESS,
        handshakes_per_prefix: int = HANDSHAKES_PER_PREFIX,
    ) -> None:
        self._clock = clock
        self._handshake_timeout = handshake_timeout
        # the DTLS listener's bounds and fair share (one mechanism): one address cannot hold every slot
        self._shares = HandshakeShares(max_handshakes, handshakes_per_address, handshakes_per_prefix)
        self.keyring = Keyring()
        self._server = TlsServer(*certificate)  # TLS 1.2, the LwM2M suites, ALPN `coap`, its PSK table
        self._handshaking: dict[TlsStream, None] = {}  # in arrival order
        self._by_peer: dict[Address, TlsStream] = {}  # the same, by the peer's address (what the shares name)
        self._streams: set[TlsStream] = set()  # authenticated
        self._sweeper: asyncio.Task[None] | None = None
        self.stats = TlsStats()
        self.on_handshake: Callable[[PeerIdentity], None] | None = None  # issue 32 #3: each authenticated one

    def protocol(self, inner: asyncio.Protocol) -> TlsStream:
        return TlsStream(self._server.accept(), inner, self)

    def now(self) -> float:
        return self._clock.now()

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="coaps-tcp-handshakes")

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None

    # ---- credentials ---------------------------------------------------------------------------------
    def load(self, keyring: Keyring) -> None:
        """Take a new keyring; connections whose credential it no longer holds end (issue 13 #4)."""
        old, self.keyring = self.keyring, keyring
        for name, entry in keyring.psks.items():
            if old.psks.get(name) != entry:
                self._server.set_psk(name.encode(), entry[0])
        for name in old.psks:
            if name not in keyring.psks:
                self._server.remove_psk(name.encode())
        self._server.set_ticket_issuers([ca.subject.public_bytes() for _, _, ca in keyring.authorities])
        for stream in list(self._streams):
            if stream.identity is not None and not keyring.still_trusts(stream.identity):
                self.stats.revoked += 1
                log.info(
                    "TLS connection of %s from %s:%d ended: its credential was revoked",
                    stream.identity.name,
                    *stream.peer,
                )
                stream.close()
                self._streams.discard(stream)

    def has_psk(self, identity: str) -> bool:
        return identity in self.keyring.psks

    def set_ticket_keys(self, keys: list[bytes]) -> None:
        """The session-ticket key ring the DTLS listener has too (issue 31 #5): a TLS client resumes on any node."""
        self._server.set_ticket_keys(keys)

    def connection_count(self) -> int:
        return len(self._streams)

    def handshake_count(self) -> int:
        """Handshakes under way (bounded by `max_handshakes` and the fair share), beside `connection_count`: read by
        whoever watches the listener's load (tests of its handshake bounds)."""
        return len(self._handshaking)

    # ---- what the streams report ---------------------------------------------------------------------
    def admit(self, stream: TlsStream) -> bool:
        refusal = self._shares.refusal(stream.peer)
        if refusal is Refusal.ADDRESS:
            self.stats.busy_address += 1
            return False
        if refusal is Refusal.PREFIX:
            self.stats.busy_prefix += 1
            return False
        if len(self._shares) >= self._shares.total:
            victim = self._shares.victim(stream.peer)
            if victim is None:
                self.stats.busy += 1
                return False
            self.stats.evicted_handshake += 1
            evicted = self._by_peer[victim]
            self._end_handshake(evicted)
            evicted.abort()
        stream.started_at = self._clock.now()
        self._handshaking[stream] = None
        self._by_peer[stream.peer] = stream
        self._shares.add(stream.peer)
        return True

    def _end_handshake(self, stream: TlsStream) -> None:
        if self._handshaking.pop(stream, False) is None:
            del self._by_peer[stream.peer]
            self._shares.remove(stream.peer)

    def established(self, stream: TlsStream) -> None:
        self._end_handshake(stream)
        self._streams.add(stream)
        self.stats.handshakes += 1
        assert stream.identity is not None
        if self.on_handshake is not None:
            self.on_handshake(stream.identity)
        log.debug("TLS connection of %s (%s) from %s:%d", stream.identity.name, stream.identity.method, *stream.peer)

    def refuse(self, stream: TlsStream, reason: str) -> None:
        self._end_handshake(stream)
        self.stats.refused += 1
        log.warning("TLS handshake from %s:%d refused: %s", stream.peer[0], stream.peer[1], reason)

    def lost(self, stream: TlsStream) -> None:
        self._end_handshake(stream)
        self._streams.discard(stream)

    async def _sweep_forever(self) -> None:
        while True:
            await self._clock.sleep(SWEEP_INTERVAL)
            now = self._clock.now()
            for stream in list(self._handshaking):
                if now - stream.started_at <= self._handshake_timeout:
                    break  # the rest started later
                self.stats.handshake_timeouts += 1
                self.refuse(stream, f"handshake not finished within {self._handshake_timeout:g} s")
                stream.abort()


@functools.cache
def _connector() -> TlsConnector:
    """One per process: its OpenSSL contexts cost about as much to build as a handshake; each connection brings its
    own credential."""
    return TlsConnector()


async def connect_tls(host: str, port: int, inner: asyncio.Protocol, credentials: ClientCredentials) -> TlsStream:
    """The client side: a TLS connection to `host:port` with a PSK or a certificate; returns once `inner` has it.
    ConnectionError when the handshake fails or the server closes the connection."""
    session = _connector().connect(**credentials.engine_options())
    loop = asyncio.get_running_loop()
    _, stream = await loop.create_connection(lambda: TlsStream(session, inner), host, port)
    assert stream.ready is not None
    await stream.ready
    return stream
