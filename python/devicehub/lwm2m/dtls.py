"""The CoAPs listener (issue 13 #1): DTLS 1.2 on one UDP socket, in front of an ordinary `CoapEndpoint`.

OpenSSL, from Rust (`devicehub._core.DtlsServer`, rust/io/src/dtls.rs), runs each peer's session on memory
datagram pipes driven from this asyncio protocol; chosen by measurement (bench/README.md "DTLS"). The endpoint
above sees plain CoAP datagrams and sends through `_SecureTransport`, which encrypts for the peer's session;
`identity(address)` tells the LwM2M layer who proved what. Suites are the LwM2M 1.1 Transport §5.2 ones:
TLS_PSK_WITH_AES_128_CCM_8 (RFC 6655) and TLS_PSK_WITH_AES_128_CBC_SHA256 for pre-shared keys (RFC 7925 §4.2: the
PSK identity is the endpoint name here), TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 and ..._AES_128_GCM_SHA256 for
certificates (RFC 7925 §4.4).

- A ClientHello without a valid cookie (an HMAC of the peer's address) is answered with a HelloVerifyRequest and
  forgotten (`DTLSv1_listen`): nothing larger than the hello goes back before the peer proves its address
  (RFC 6347 §4.2.1).
- At most `max_handshakes` handshakes run at once, each for at most `handshake_timeout` seconds; at most
  `handshakes_per_address` of them from one source address and `handshakes_per_prefix` from one /24 (IPv4) or /64
  (IPv6), and when all are taken a newcomer under its fair share takes the oldest of the largest holder's
  (lwm2m/handshake_shares.py, issue 28 #3): one source cannot starve the others of handshakes.
- Established sessions are bounded per identity (`sessions_per_identity`: a new one ends that identity's oldest)
  and in all (`max_sessions`: a new one ends the least recently active), so a new device always gets in (issue 28
  #4); a session silent for `idle_timeout` seconds ends. Each eviction is counted by cause (`DtlsStats`).
- A client certificate must be issued directly by a CA some account trusts and be valid now; its subject CN is
  the identity, the CA's account the account. The check is ours (OpenSSL requests the certificate, accepts any
  chain and verifies the CertificateVerify signature), so the refusal says why: expired, untrusted, no CN.
- Each refused handshake is logged once, with its reason; `load()` of a keyring that no longer holds a credential
  ends the sessions it proved.
- Session resumption (RFC 5246 §7.3): a client offering a cached session gets the abbreviated handshake
  (`stats.resumed`). Its identity is the resumed session's — the PSK identity or the certificate it was established
  with, judged again against the keyring now. Each cached session is tagged with the credential that proved it;
  `load()` drops the cached sessions of revoked PSKs and CAs, so an offer of one gets a full handshake, refused like
  any other.
- Session tickets (RFC 5077, issue 31 #5) under a key ring the nodes share through the store (`set_ticket_keys`,
  lwm2m/ticket_rotation.py): a device resumes on any node, and on its node after a restart. A ticket cannot be
  withdrawn, so a PSK session's ticket carries the identity and a digest of its key, and resumes only while the PSK
  table holds that key (a revoked or rotated PSK gets a full handshake); a certificate session's ticket resumes only
  while its certificate's issuer is among the trusted CAs (`set_ticket_issuers` at each `load()`), and the
  certificate it carries is judged again as above.
Until 2026-11-23 python-mbedtls ran these sessions: it binds no session cache and no tickets, so every offered
session got a full handshake; with OpenSSL the DTLS layer also costs the server about a third less CPU per
notification (bench/README.md "The service on OpenSSL"). Since issue 29 #7 the TLS/TCP listener and the DTLS
client run on the same engine (rust/io/src/tls.rs) and python-mbedtls is gone.
Not offered: connection IDs (RFC 9146) — OpenSSL has no DTLS CID in any release (openssl/openssl#18724).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
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

from devicehub._core import DtlsError, DtlsServer, DtlsSession
from devicehub.clock import Clock
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.handshake_shares import HANDSHAKES_PER_ADDRESS, HANDSHAKES_PER_PREFIX, HandshakeShares, Refusal
from devicehub.lwm2m.security import AuthenticatedAddress, Keyring, PeerIdentity, authenticate, failure_reason
from devicehub.lwm2m.udp import widen_receive_buffer

log = logging.getLogger("devicehub.dtls")

HANDSHAKE_TIMEOUT = 10.0
MAX_HANDSHAKES = 256
# A session outlives the longest registration lifetime, 72 h (server.MAX_LIFETIME, the Pelion cap of
# lwm2m-device-side.md §2; a Register without `lt` means 86 400 s, LwM2M Core §6.2.1): a device that updates
# within its lifetime keeps its session and need not handshake again, and a session silent for longer belongs to a
# registration that has expired. Exhaustion is bounded by the two limits below, not by this time-out.
IDLE_TIMEOUT = 3 * 86_400.0
MAX_SESSIONS = 100_000
SESSIONS_PER_IDENTITY = 2  # one device, one endpoint name, one session; the second is one it left behind on restart
SWEEP_INTERVAL = 1.0
CACHE_SIZE = 20_000  # sessions kept for resumption
CACHE_TIMEOUT = 86_400  # s: how long a device may sleep and still resume


@dataclass(slots=True)
class DtlsStats:
    handshakes: int = 0
    resumed: int = 0  # of the handshakes, abbreviated ones (a cached session resumed)
    hello_verify_requests: int = 0
    refused: int = 0
    busy: int = 0  # every handshake slot taken, and the newcomer's prefix held no fewer than any other
    busy_address: int = 0  # ClientHellos from an address holding its share of handshakes, dropped unanswered
    busy_prefix: int = 0  # … from a /24 or /64 holding its share
    evicted_handshake: int = 0  # a half-open handshake ended to give its slot to a source under its share
    evicted_identity: int = 0  # an identity's oldest session ended by its newest beyond sessions_per_identity
    evicted_lru: int = 0  # the least recently active session ended for a new one, max_sessions being reached
    evicted_idle: int = 0  # a session silent for idle_timeout ended
    timeouts: int = 0
    records_in: int = 0
    records_out: int = 0
    dropped: int = 0
    revoked: int = 0


@dataclass(slots=True)
class _Session:
    engine: DtlsSession
    started_at: float
    last_seen: float
    identity: PeerIdentity | None = None
    remote: AuthenticatedAddress | None = None  # the address with `identity`: the remote of what it sends up


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
        handshakes_per_address: int = HANDSHAKES_PER_ADDRESS,
        handshakes_per_prefix: int = HANDSHAKES_PER_PREFIX,
        idle_timeout: float = IDLE_TIMEOUT,
        max_sessions: int = MAX_SESSIONS,
        sessions_per_identity: int = SESSIONS_PER_IDENTITY,
        on_end: Callable[[Address, PeerIdentity], None] | None = None,
    ) -> None:
        self._clock = clock
        self._endpoint = endpoint
        self._handshake_timeout = handshake_timeout
        self._shares = HandshakeShares(max_handshakes, handshakes_per_address, handshakes_per_prefix)
        self._idle_timeout = idle_timeout
        self._max_sessions = max_sessions
        self._sessions_per_identity = sessions_per_identity
        self._on_end = on_end
        self._keyring = Keyring()
        self._server = DtlsServer(*certificate, cache_size=CACHE_SIZE, cache_timeout=CACHE_TIMEOUT)
        self._sessions: dict[Address, _Session] = {}
        self._recent: OrderedDict[Address, None] = OrderedDict()  # established sessions, least recently active first
        self._by_identity: dict[tuple[str, str, str], dict[Address, None]] = {}  # established, oldest first
        self._udp: asyncio.DatagramTransport | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.stats = DtlsStats()
        self.on_handshake: Callable[[PeerIdentity], None] | None = None  # issue 32 #3: each authenticated one

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
        widen_receive_buffer(transport.get_extra_info("socket"))  # a handshake storm's burst waits, as plain CoAP's
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
        """Take a new keyring; sessions whose credential it no longer holds end, and cached sessions proved by a
        credential it no longer holds as it was can no longer be resumed (issue 13 #4)."""
        old, self._keyring = self._keyring, keyring
        for name, entry in keyring.psks.items():
            if old.psks.get(name) != entry:
                self._server.set_psk(name.encode(), entry[0])
        for name, entry in old.psks.items():
            if keyring.psks.get(name) != entry:
                self._server.forget(_tag("psk", name))
                if name not in keyring.psks:
                    self._server.remove_psk(name.encode())
        for authority in old.authorities:
            if authority not in keyring.authorities:
                self._server.forget(_tag("x509", authority[0]))
        self._server.set_ticket_issuers([ca.subject.public_bytes() for _, _, ca in keyring.authorities])
        for address, session in list(self._sessions.items()):
            identity = session.identity
            if identity is not None and not keyring.still_trusts(identity):
                self.stats.revoked += 1
                log.info("DTLS session of %s from %s:%d ended: its credential was revoked", identity.name, *address)
                self._end(address, notify=True)

    def set_ticket_keys(self, keys: list[bytes]) -> None:
        """The session-ticket key ring (issue 31 #5): `keys[0]` seals new tickets, every key opens them."""
        self._server.set_ticket_keys(keys)

    def has_psk(self, identity: str) -> bool:
        return identity in self._keyring.psks

    def identity(self, address: Address) -> PeerIdentity | None:
        session = self._sessions.get(address)
        return None if session is None else session.identity

    def cipher(self, address: Address) -> str | None:
        """The negotiated suite of the peer's session, named as Mbed TLS names it: `TLS-PSK-WITH-AES-128-CCM-8`."""
        session = self._sessions.get(address)
        if session is None or session.identity is None:
            return None
        name = session.engine.cipher
        return None if name is None else name.replace("_", "-")

    def session_count(self) -> int:
        return len(self._sessions)

    # ---- sending ----------------------------------------------------------------------------------------
    def send(self, data: bytes, address: Address) -> None:
        session = self._sessions.get(address)
        if session is None or session.identity is None:
            self.stats.dropped += 1  # the peer's session is gone: the exchange above times out
            return
        try:
            out = session.engine.send(data)
        except DtlsError:
            self.stats.dropped += 1
            return
        self.stats.records_out += 1
        self._transmit(out, address)

    def _transmit(self, datagrams: list[bytes], address: Address) -> None:
        if self._udp is not None:
            for datagram in datagrams:
                self._udp.sendto(datagram, address)

    # ---- receiving --------------------------------------------------------------------------------------
    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        address: Address = (addr[0], addr[1])
        session = self._sessions.get(address)
        if session is not None and session.identity is not None and _is_client_hello(data):
            self._end(address, notify=True)  # the peer starts over (a restarted device, or one resuming)
            session = None
        if session is None:
            self._accept(address, data)
            return
        session.last_seen = self._clock.now()
        if session.identity is not None:
            self._recent.move_to_end(address)
        records, out = session.engine.feed(data)
        if out:
            self._transmit(out, address)
        if session.identity is None:
            self._handshake(address, session, records)
        elif records:
            self._deliver(session, records)
        elif session.engine.closed:
            self._end(address, notify=False)

    def _accept(self, address: Address, data: bytes) -> None:
        if not _is_client_hello(data):
            self.stats.dropped += 1
            return
        shares = self._shares
        refusal = shares.refusal(address)
        if refusal is Refusal.ADDRESS:  # its source holds its share already: not even a HelloVerifyRequest is spent
            self.stats.busy_address += 1
            return
        if refusal is Refusal.PREFIX:
            self.stats.busy_prefix += 1
            return
        engine, out = self._server.accept(f"{address[0]}:{address[1]}".encode(), data)
        if engine is None:
            self._transmit(out, address)
            if out:
                self.stats.hello_verify_requests += 1  # stateless until the peer echoes the cookie
            else:
                self.stats.dropped += 1
            return
        if len(shares) >= shares.total:  # the cookie was valid, and every slot is taken
            victim = shares.victim(address)
            if victim is None:
                self.stats.busy += 1
                return  # the engine goes unanswered; the peer retransmits its hello
            self.stats.evicted_handshake += 1
            log.info("DTLS handshake from %s:%d ended: its slot went to %s:%d", *victim, *address)
            self._forget(victim)
        self._transmit(out, address)
        now = self._clock.now()
        session = self._sessions[address] = _Session(engine, now, now)
        shares.add(address)
        self._handshake(address, session, [])

    def _handshake(self, address: Address, session: _Session, records: list[bytes]) -> None:
        engine = session.engine
        if engine.failure is not None:  # its alert is sent
            self._refuse(address, failure_reason(engine.failure, engine.psk_identity, self._keyring))
            return
        if not engine.established:
            return
        identity, reason = authenticate(engine.psk_identity, engine.peer_certificate, self._keyring, self._clock.now())
        if identity is None:
            engine.discard(self._server)  # not to be resumed either
            self._refuse(address, reason)
            return
        engine.remember(self._server, _tag(identity.method, identity.credential))
        self._shares.remove(address)
        self._make_room(identity)
        session.identity = identity
        session.remote = AuthenticatedAddress(address[0], address[1], identity)
        self._recent[address] = None
        self._by_identity.setdefault(_identity_key(identity), {})[address] = None
        self.stats.handshakes += 1
        if self.on_handshake is not None:
            self.on_handshake(identity)
        resumed = engine.session_reused()
        self.stats.resumed += resumed
        log.debug(
            "DTLS session of %s (%s, %s%s) from %s:%d",
            identity.name, identity.method, engine.cipher, ", resumed" if resumed else "", *address,
        )  # fmt: skip
        if records:
            self._deliver(session, records)

    def _deliver(self, session: _Session, records: list[bytes]) -> None:
        address = session.remote
        assert address is not None  # established: the endpoint learns who sent it from the address
        self.stats.records_in += len(records)
        endpoint = self._endpoint
        if endpoint.observe_lane is not None:  # the armed observations' notifications, without the Python path
            records = endpoint.lane_sift(records, address)
        for record in records:
            endpoint.datagram_received(record, address)

    def _make_room(self, identity: PeerIdentity) -> None:
        """Before a session of `identity` joins the table: end that identity's oldest beyond its limit, then the
        least recently active if the table is full. Only an authenticated peer evicts; a handshake cannot."""
        own = self._by_identity.get(_identity_key(identity), {})
        while len(own) >= self._sessions_per_identity:
            oldest = next(iter(own))
            self.stats.evicted_identity += 1
            log.info("DTLS session of %s from %s:%d ended: a newer one of the same identity", identity.name, *oldest)
            self._end(oldest, notify=True)
        while len(self._recent) >= self._max_sessions:
            self.stats.evicted_lru += 1
            self._end(next(iter(self._recent)), notify=True)

    # ---- ending -----------------------------------------------------------------------------------------
    def _refuse(self, address: Address, reason: str) -> None:
        self.stats.refused += 1
        log.warning("DTLS handshake from %s:%d refused: %s", address[0], address[1], reason)
        self._forget(address)

    def _forget(self, address: Address) -> None:
        session = self._sessions.pop(address, None)
        if session is not None and session.identity is None:
            self._shares.remove(address)
        elif session is not None and session.identity is not None:
            del self._recent[address]
            key = _identity_key(session.identity)
            own = self._by_identity[key]
            del own[address]
            if not own:
                del self._by_identity[key]
        if self._endpoint.observe_lane is not None:  # what was armed was armed for this session's identity
            self._endpoint.observe_lane.disarm_remote(address)

    def _end(self, address: Address, *, notify: bool) -> None:
        session = self._sessions.get(address)
        if session is None:
            return
        if notify and session.identity is not None:
            self._transmit(session.engine.shutdown(), address)  # close_notify
        self._forget(address)
        if session.identity is not None and self._on_end is not None:
            self._on_end(address, session.identity)

    async def _sweep_forever(self) -> None:
        while True:
            await self._clock.sleep(SWEEP_INTERVAL)
            now = self._clock.now()
            for address in self._shares.addresses():  # the handshakes under way: at most max_handshakes
                session = self._sessions[address]
                if now - session.started_at > self._handshake_timeout:
                    self.stats.timeouts += 1
                    self._refuse(address, f"handshake not finished within {self._handshake_timeout:g} s")
                else:
                    self._transmit(session.engine.handle_timeout(), address)  # a lost flight, sent again
            idle = []
            for address in self._recent:  # least recently active first: the silent ones are at the front
                if now - self._sessions[address].last_seen <= self._idle_timeout:
                    break
                idle.append(address)
            for address in idle:
                self.stats.evicted_idle += 1
                self._end(address, notify=True)


def _tag(method: str, credential: str) -> str:
    """What a cached session is tagged with: the credential a revocation matches (PeerIdentity.credential)."""
    return f"{method}:{credential}"


def _identity_key(identity: PeerIdentity) -> tuple[str, str, str]:
    """Whose sessions are counted together: one identity of one account, by its method."""
    return identity.method, identity.account_id, identity.name


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
