"""The CoAPs listener (issue 13 #1): DTLS 1.2 on one UDP socket, in front of an ordinary `CoapEndpoint`.

Mbed TLS (PyPI `python-mbedtls`) runs each peer's session on memory buffers driven from this asyncio protocol;
chosen by measurement (bench/README.md "DTLS"). The endpoint above sees plain CoAP datagrams and sends through
`_SecureTransport`, which encrypts for the peer's session; `identity(address)` tells the LwM2M layer who proved
what. Suites are the LwM2M 1.1 Transport §5.2 ones: TLS_PSK_WITH_AES_128_CCM_8 (RFC 6655) and
TLS_PSK_WITH_AES_128_CBC_SHA256 for pre-shared keys (RFC 7925 §4.2: the PSK identity is the endpoint name here),
TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 and ..._AES_128_GCM_SHA256 for certificates (RFC 7925 §4.4).

- A ClientHello without a valid cookie is answered with a HelloVerifyRequest and forgotten: no state is kept and
  nothing larger than the hello goes back before the peer proves its address (RFC 6347 §4.2.1).
- At most `max_handshakes` handshakes run at once, each for at most `handshake_timeout` seconds.
- A client certificate must be issued directly by a CA some account trusts and be valid now; its subject CN is
  the identity, the CA's account the account. The check is ours (Mbed TLS runs with authmode OPTIONAL and has
  verified the CertificateVerify signature), so the refusal says why: expired, untrusted, no CN.
- Each refused handshake is logged once, with its reason; `revoke()` ends the sessions of removed credentials.
Not offered: session resumption and connection IDs. python-mbedtls 2.10 never calls
mbedtls_ssl_conf_session_cache or mbedtls_ssl_conf_session_tickets (commented out at _tls.pxd:266, :301), so a
client offering a previous session gets a full handshake (its PSK callback runs again: the identity rules and
revocation hold); CID is neither bound nor compiled into its Mbed TLS 2.28 (bench/README.md, "DTLS session
resumption").
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)
from cryptography.x509.oid import NameOID
from mbedtls import tls
from mbedtls.exceptions import TLSError

from devicehub.clock import Clock
from devicehub.lwm2m.security import (
    MAX_RECORD,
    Keyring,
    PeerIdentity,
    PskLookup,
    authenticate,
    failure_reason,
    server_options,
    step_handshake,
)
from devicehub.lwm2m.transport import Address, CoapEndpoint

log = logging.getLogger("devicehub.dtls")

HANDSHAKE_TIMEOUT = 10.0
MAX_HANDSHAKES = 256
IDLE_TIMEOUT = 3 * 86_400.0  # a session outlives the longest registration lifetime (72 h)
MAX_SESSIONS = 100_000
SWEEP_INTERVAL = 1.0


@dataclass(slots=True)
class DtlsStats:
    handshakes: int = 0
    hello_verify_requests: int = 0
    refused: int = 0
    busy: int = 0
    timeouts: int = 0
    records_in: int = 0
    records_out: int = 0
    dropped: int = 0
    revoked: int = 0


@dataclass(slots=True)
class _Session:
    buffer: tls.TLSWrappedBuffer
    started_at: float
    last_seen: float
    identity: PeerIdentity | None = None
    psk_identity: str | None = None


class _SecureTransport:
    """What the CoapEndpoint above sends through: each datagram becomes one record of the peer's session."""

    def __init__(self, listener: DtlsListener) -> None:
        self._listener = listener

    def sendto(self, data: bytes, addr: Address) -> None:
        self._listener.send(data, addr)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._listener.get_extra_info(name, default)

    def close(self) -> None:
        pass


class DtlsListener(asyncio.DatagramProtocol):
    """DTLS sessions by peer address, feeding one CoapEndpoint; see the module docstring."""

    def __init__(
        self,
        clock: Clock,
        endpoint: CoapEndpoint,
        certificate: tuple[bytes, bytes],
        *,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        max_handshakes: int = MAX_HANDSHAKES,
        idle_timeout: float = IDLE_TIMEOUT,
        on_end: Callable[[Address, PeerIdentity], None] | None = None,
    ) -> None:
        self._clock = clock
        self._endpoint = endpoint
        self._handshake_timeout = handshake_timeout
        self._max_handshakes = max_handshakes
        self._idle_timeout = idle_timeout
        self._on_end = on_end
        self._lookup = PskLookup()
        self._context = tls.ServerContext(server_configuration(certificate, self._lookup))
        self._sessions: dict[Address, _Session] = {}
        self._scratch = bytearray(MAX_RECORD)  # one read buffer, reused: records are copied out of it
        self._handshaking = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.stats = DtlsStats()

    # ---- lifecycle ----------------------------------------------------------------------------------
    @classmethod
    async def bind(cls, host: str, port: int, clock: Clock, endpoint: CoapEndpoint, **options: Any) -> DtlsListener:
        loop = asyncio.get_running_loop()
        _, listener = await loop.create_datagram_endpoint(
            lambda: cls(clock, endpoint, **options), local_addr=(host, port)
        )
        return listener

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._udp = cast(asyncio.DatagramTransport, transport)
        self._endpoint.connection_made(cast(asyncio.DatagramTransport, _SecureTransport(self)))
        self._sweeper = asyncio.ensure_future(self._sweep_forever())

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default if self._udp is None else self._udp.get_extra_info(name, default)

    @property
    def address(self) -> Address:
        host, port = self.get_extra_info("sockname")[:2]
        return str(host), int(port)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for address in list(self._sessions):
            self._end(address, notify=True)
        await self._endpoint.close()
        if self._udp is not None:
            self._udp.close()
            self._udp = None

    # ---- credentials ---------------------------------------------------------------------------------
    def load(self, keyring: Keyring) -> None:
        """Take a new keyring; sessions whose credential it no longer holds end (issue 13 #4)."""
        self._lookup.keyring = keyring
        for address, session in list(self._sessions.items()):
            identity = session.identity
            if identity is not None and not keyring.still_trusts(identity):
                self.stats.revoked += 1
                log.info("DTLS session of %s from %s:%d ended: its credential was revoked", identity.name, *address)
                self._end(address, notify=True)

    def has_psk(self, identity: str) -> bool:
        return identity in self._lookup.keyring.psks

    def identity(self, address: Address) -> PeerIdentity | None:
        session = self._sessions.get(address)
        return None if session is None else session.identity

    def cipher(self, address: Address) -> str | None:
        """The negotiated suite of the peer's session (Mbed TLS names it `TLS-PSK-WITH-AES-128-CCM-8`)."""
        session = self._sessions.get(address)
        return None if session is None or session.identity is None else str(session.buffer.cipher())

    def session_count(self) -> int:
        return len(self._sessions)

    # ---- sending ----------------------------------------------------------------------------------------
    def send(self, data: bytes, address: Address) -> None:
        session = self._sessions.get(address)
        if session is None or session.identity is None:
            self.stats.dropped += 1  # the peer's session is gone: the exchange above times out
            return
        session.buffer.write(data)
        self.stats.records_out += 1
        self._flush(session, address)

    def _flush(self, session: _Session, address: Address) -> None:
        buffer = session.buffer
        while buffer._output_buffer:
            chunk = buffer.peek_outgoing(MAX_RECORD)
            buffer.consume_outgoing(len(chunk))
            if self._udp is not None:
                self._udp.sendto(chunk, address)

    # ---- receiving --------------------------------------------------------------------------------------
    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        address: Address = (addr[0], addr[1])
        session = self._sessions.get(address)
        if session is not None and session.identity is not None and _is_client_hello(data):
            self._end(address, notify=True)  # the peer starts over (a restarted device): a new handshake
            session = None
        if session is None:
            if not _is_client_hello(data):
                self.stats.dropped += 1
                return
            if self._handshaking >= self._max_handshakes or len(self._sessions) >= MAX_SESSIONS:
                self.stats.busy += 1
                return
            now = self._clock.now()
            buffer = self._context.wrap_buffers()
            buffer.setcookieparam(f"{address[0]}:{address[1]}".encode())
            session = self._sessions[address] = _Session(buffer, now, now)
            self._handshaking += 1
        session.last_seen = self._clock.now()
        try:
            session.buffer.receive_from_network(data)
        except TLSError:
            self.stats.dropped += 1
            return
        if session.identity is None:
            self._handshake(address, session)
        else:
            self._read(address, session, 1 if len(data) == 13 + int.from_bytes(data[11:13], "big") else 0)

    def _handshake(self, address: Address, session: _Session) -> None:
        buffer = session.buffer
        self._lookup.offered = None
        try:
            if not step_handshake(buffer, lambda: self._flush(session, address)):
                return
        except tls.HelloVerifyRequest:
            self.stats.hello_verify_requests += 1
            self._flush(session, address)
            self._forget(address)  # stateless until the peer echoes the cookie
            return
        except TLSError as error:  # the alert is sent
            offered = self._lookup.offered or session.psk_identity
            self._refuse(address, failure_reason(error, offered, self._lookup.keyring))
            return
        finally:
            session.psk_identity = self._lookup.offered or session.psk_identity
        identity, reason = authenticate(buffer, session.psk_identity, self._lookup.keyring, self._clock.now())
        if identity is None:
            self._refuse(address, reason)
            return
        session.identity = identity
        self._handshaking -= 1
        self.stats.handshakes += 1
        log.debug("DTLS session of %s (%s, %s) from %s:%d", identity.name, identity.method, buffer.cipher(), *address)
        self._read(address, session)

    def _read(self, address: Address, session: _Session, records: int = 0) -> None:
        """Hand each decrypted record to the endpoint; `records` = how many the datagram holds (0: unknown)."""
        buffer = session.buffer
        scratch = self._scratch
        while True:
            try:
                size = buffer.readinto(scratch, MAX_RECORD)  # type: ignore[arg-type]  # the stub says bytes; it writes
            except tls.WantReadError:
                return
            except tls.RaggedEOF:
                self._end(address, notify=False)
                return
            except TLSError as error:
                log.debug("DTLS session from %s:%d ended: %s", address[0], address[1], error)
                self._end(address, notify=False)
                return
            if not size:
                return
            self.stats.records_in += 1
            self._endpoint.datagram_received(bytes(scratch[:size]), address)
            records -= 1
            if records == 0:  # the datagram's only record: no second read (it would raise WantReadError)
                return

    # ---- ending -----------------------------------------------------------------------------------------
    def _refuse(self, address: Address, reason: str) -> None:
        self.stats.refused += 1
        log.warning("DTLS handshake from %s:%d refused: %s", address[0], address[1], reason)
        self._forget(address)

    def _forget(self, address: Address) -> None:
        session = self._sessions.pop(address, None)
        if session is not None and session.identity is None:
            self._handshaking -= 1

    def _end(self, address: Address, *, notify: bool) -> None:
        session = self._sessions.get(address)
        if session is None:
            return
        if notify and session.identity is not None:
            try:
                session.buffer.shutdown()  # close_notify
            except TLSError:
                pass
            self._flush(session, address)
        self._forget(address)
        if session.identity is not None and self._on_end is not None:
            self._on_end(address, session.identity)

    async def _sweep_forever(self) -> None:
        while True:
            await self._clock.sleep(SWEEP_INTERVAL)
            now = self._clock.now()
            for address, session in list(self._sessions.items()):
                if session.identity is None and now - session.started_at > self._handshake_timeout:
                    self.stats.timeouts += 1
                    self._refuse(address, f"handshake not finished within {self._handshake_timeout:g} s")
                elif session.identity is not None and now - session.last_seen > self._idle_timeout:
                    self._end(address, notify=True)


def server_configuration(certificate: tuple[bytes, bytes], psks: Mapping[str, bytes]) -> tls.DTLSConfiguration:
    """The listener's Mbed TLS configuration: DTLS 1.2 only, and what both listeners share (security.server_options:
    the LwM2M suites, our certificate, PSKs looked up in `psks`); bench/micro/dtls_library_bench.py measures it."""
    return tls.DTLSConfiguration(
        lowest_supported_version=tls.DTLSVersion.DTLSv1_2,
        highest_supported_version=tls.DTLSVersion.DTLSv1_2,
        **server_options(certificate, psks),
    )


def _is_client_hello(data: bytes) -> bool:
    """A DTLS handshake record of epoch 0 carrying a ClientHello (RFC 6347 §4.1, §4.2.2)."""
    return len(data) > 25 and data[0] == 22 and data[3:5] == b"\x00\x00" and data[13] == 1


def server_certificate(cert_file: Path, key_file: Path, *, create: bool) -> tuple[bytes, bytes]:
    """The DTLS server's certificate and key as DER, read from PEM files; with `create`, a self-signed P-256 pair
    is made there first when they do not exist (the ECDHE-ECDSA suites need an EC key)."""
    if create and not cert_file.exists() and not key_file.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "devicehub")])
        now = datetime.now(UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=3650))
            .sign(key, hashes.SHA256())
        )
        key_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
        cert_file.write_bytes(certificate.public_bytes(Encoding.PEM))
    certificate = x509.load_pem_x509_certificate(cert_file.read_bytes())
    private = load_pem_private_key(key_file.read_bytes(), password=None)
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_file}: the DTLS server key must be an EC key (ECDHE-ECDSA suites)")
    return certificate.public_bytes(Encoding.DER), private.private_bytes(
        Encoding.DER, PrivateFormat.PKCS8, NoEncryption()
    )
