"""Who a (D)TLS peer proved to be: what the DTLS listener (lwm2m/dtls.py) and the TLS-over-TCP one (lwm2m/tls_stream.py)
share — the keyring, the certificate check, the identity a handshake proved, why one failed, revocation — and the
client's credentials (simulator, Edge Core). Both listeners and the clients run on one engine, OpenSSL from Rust
(rust/io/src/dtls.rs, rust/io/src/tls.rs), which offers the LwM2M 1.1 Transport §5.2/§5.3 suites.

The identity rules are the same on both transports (issue 13 #2): a PSK identity, or the subject CN of a
certificate issued directly by a CA some account trusts, is the device's name; the credential's account is its
account; a credential removed from the keyring ends the sessions that proved it (issue 13 #4).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """Who a (D)TLS peer proved to be: a PSK identity or a certificate CN, in the credential's account."""

    name: str
    account_id: str
    method: str  # "psk" | "x509"
    credential: str  # the PSK identity or the trusted CA's id: what a revocation matches


class AuthenticatedAddress(tuple[str, int]):
    """A peer's (host, port) with the identity its (D)TLS session proved, as aiocoap's remotes carry their
    `authenticated_claims` (issue 29 #2): the listener that decrypted a message hands it up as the message's remote,
    DTLS and TLS over TCP alike, and the authorizer reads the identity from there. It equals and hashes as the plain
    address, so exchanges, de-duplication and the listeners' tables key on it as on any address."""

    identity: PeerIdentity

    def __new__(cls, host: str, port: int, identity: PeerIdentity) -> AuthenticatedAddress:
        address = super().__new__(cls, (host, port))
        address.identity = identity
        return address


def identity_of(remote: tuple[str, int]) -> PeerIdentity | None:
    """Who the peer at `remote` proved to be; None for a plain CoAP remote."""
    return remote.identity if isinstance(remote, AuthenticatedAddress) else None


@dataclass(frozen=True, slots=True)
class Keyring:
    """What the listeners trust; replaced as a whole on every credential change."""

    psks: Mapping[str, tuple[bytes, str]] = field(default_factory=dict)  # identity → (key, account id)
    authorities: Sequence[tuple[str, str, x509.Certificate]] = ()  # (CA id, account id, certificate)

    def still_trusts(self, identity: PeerIdentity) -> bool:
        """Does this keyring still hold the credential `identity` was proved with?"""
        if identity.method == "psk":
            return identity.credential in self.psks
        return any(ca_id == identity.credential for ca_id, _, _ in self.authorities)


def authenticate(
    psk_identity: str | None, certificate: bytes | None, keyring: Keyring, now: float
) -> tuple[PeerIdentity | None, str]:
    """The identity a finished handshake proved (its PSK identity, else its client certificate as DER), or None
    and why it is refused."""
    if psk_identity is not None:
        entry = keyring.psks.get(psk_identity)
        if entry is None:
            return None, f"PSK identity {psk_identity!r} was revoked during the handshake"
        return PeerIdentity(psk_identity, entry[1], "psk", psk_identity), ""
    der = certificate
    if not der:
        return None, "no PSK identity and no client certificate"
    return certificate_identity(der, keyring, now)


def failure_reason(error: object, offered: str | None, keyring: Keyring) -> str:
    """Why a handshake failed, for the log: `error` is the library's exception or message."""
    if offered is not None and offered not in keyring.psks:
        return f"unknown PSK identity {offered!r}"
    if offered is not None:
        return f"PSK identity {offered!r}: the handshake did not verify (wrong key?): {error}"
    return f"handshake failed: {error}"


def certificate_identity(der: bytes, keyring: Keyring, now: float) -> tuple[PeerIdentity | None, str]:
    try:
        certificate = x509.load_der_x509_certificate(der)
    except ValueError:
        return None, "unreadable client certificate"
    subject = certificate.subject.rfc4514_string()
    issuer = None
    for ca_id, account_id, authority in keyring.authorities:
        if authority.subject != certificate.issuer:
            continue
        try:
            certificate.verify_directly_issued_by(authority)
        except (ValueError, TypeError, InvalidSignature):
            continue
        issuer = (ca_id, account_id, authority)
        break
    if issuer is None:
        return None, f"certificate {subject!r} is not issued by a trusted CA"
    if not certificate.not_valid_before_utc.timestamp() <= now <= certificate.not_valid_after_utc.timestamp():
        return None, f"certificate {subject!r} is expired or not yet valid"
    if not issuer[2].not_valid_before_utc.timestamp() <= now <= issuer[2].not_valid_after_utc.timestamp():
        return None, f"the CA of {subject!r} is expired"
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names or not isinstance(names[0].value, str):
        return None, f"certificate {subject!r} has no common name"
    return PeerIdentity(names[0].value, issuer[1], "x509", issuer[0]), ""


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    """A device's credentials for `coaps://` or `coaps+tcp://`: a PSK (`psk_identity`, `psk_key`) or a certificate
    and its key (PEM files). The server's certificate is not checked: the simulator is a test tool."""

    psk_identity: str = ""
    psk_key: bytes = b""
    cert_file: str = ""
    key_file: str = ""

    def engine_options(self) -> dict[str, bytes]:
        """The keyword arguments of `devicehub._core.TlsConnector` and `DtlsConnector`: the PSK, or the certificate
        and key read from their PEM files (one file may hold both)."""
        if self.psk_identity:
            return {"psk_identity": self.psk_identity.encode(), "psk_key": self.psk_key}
        with open(self.cert_file, "rb") as certificate, open(self.key_file, "rb") as key:
            return {"certificate": certificate.read(), "key": key.read()}


def client_credentials(
    server: str, endpoint_name: str, *, psk_identity: str = "", psk_key: str = "", cert: str = "", key: str = ""
) -> ClientCredentials | None:
    """The credentials of one client of a `coaps://` or `coaps+tcp://` server (None for any other scheme); the PSK
    identity defaults to the endpoint name, so one `--psk-key` serves a fleet whose names each have that key.
    ValueError when a secure server has none, or the key is not hex."""
    if not server.startswith(("coaps:", "coaps+tcp:")):
        return None
    if cert:
        for path in {cert, key or cert}:  # said now, not later as a server that never answers
            if not os.path.isfile(path):
                raise ValueError(f"certificate or key file {path} not found")
        return ClientCredentials(cert_file=cert, key_file=key or cert)
    if not psk_key:
        raise ValueError("a coaps:// or coaps+tcp:// server needs --psk-key (with --psk-identity) or --cert/--key")
    hex_key = psk_key[2:] if psk_key[:2].lower() == "0x" else psk_key
    try:
        secret = bytes.fromhex(hex_key)
    except ValueError:
        raise ValueError("--psk-key must be the key in hexadecimal (optionally 0x…)") from None
    return ClientCredentials(psk_identity=psk_identity or endpoint_name, psk_key=secret)
