"""Who a (D)TLS peer proved to be: what the DTLS listener (lwm2m/dtls.py) and the TLS-over-TCP one (lwm2m/tls_stream.py)
share — the cipher suites, the keyring, the PSK lookup Mbed TLS calls, the certificate check, the handshake step
loop on memory buffers, revocation — and the client's credentials (simulator, Edge Core).

The identity rules are the same on both transports (issue 13 #2): a PSK identity, or the subject CN of a
certificate issued directly by a CA some account trusts, is the device's name; the credential's account is its
account; a credential removed from the keyring ends the sessions that proved it (issue 13 #4).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID
from mbedtls import pk as mbedtls_pk
from mbedtls import tls
from mbedtls import x509 as mbedtls_x509
from mbedtls.exceptions import TLSError

# LwM2M 1.1 Transport §5.2 (DTLS) and §5.3 (TLS over TCP) name the same suites
PSK_SUITES = ("TLS-PSK-WITH-AES-128-CCM-8", "TLS-PSK-WITH-AES-128-CBC-SHA256")
CERT_SUITES = ("TLS-ECDHE-ECDSA-WITH-AES-128-CCM-8", "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256")
MAX_RECORD = 16_384
# the stubs type HandshakeStep members as int; at run time they are enum members
HANDSHAKE_OVER: Any = tls.HandshakeStep.HANDSHAKE_OVER


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """Who a (D)TLS peer proved to be: a PSK identity or a certificate CN, in the credential's account."""

    name: str
    account_id: str
    method: str  # "psk" | "x509"
    credential: str  # the PSK identity or the trusted CA's id: what a revocation matches


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


class PskLookup(Mapping[str, bytes]):
    """The PSK store Mbed TLS calls during a handshake; it notes which identity the peer offered."""

    def __init__(self) -> None:
        self.keyring = Keyring()
        self.offered: str | None = None

    def __getitem__(self, identity: str) -> bytes:
        self.offered = identity
        return self.keyring.psks[identity][0]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keyring.psks)

    def __len__(self) -> int:
        return len(self.keyring.psks)


def server_options(certificate: tuple[bytes, bytes], lookup: Mapping[str, bytes]) -> dict[str, Any]:
    """The Mbed TLS configuration both listeners share: PSK and certificate suites, our certificate, the PSK store;
    authmode OPTIONAL (`validate_certificates=False`): `authenticate` decides, so a refusal says why."""
    cert_der, key_der = certificate
    return {
        "ciphers": PSK_SUITES + CERT_SUITES,
        "certificate_chain": ((mbedtls_x509.CRT.from_DER(cert_der),), mbedtls_pk.ECC.from_DER(key_der)),
        "validate_certificates": False,
        "pre_shared_key_store": lookup,
    }


def step_handshake(buffer: tls.TLSWrappedBuffer, flush: Callable[[], None]) -> bool:
    """Run the handshake as far as the bytes received allow, sending what it produces; True once it is over.

    Raises what Mbed TLS raises: TLSError when it fails (the alert is flushed first), HelloVerifyRequest (DTLS)."""
    try:
        while buffer._handshake_state is not HANDSHAKE_OVER:
            try:
                buffer.do_handshake()
            except tls.WantWriteError:
                flush()
    except tls.WantReadError:
        flush()
        return False
    except TLSError:
        flush()
        raise
    flush()
    return True


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

    def configuration(self, *, stream: bool = False) -> tls.DTLSConfiguration | tls.TLSConfiguration:
        """DTLS 1.2, or with `stream` TLS 1.2 (the version LwM2M 1.1 Transport §5.3 names)."""
        options: dict[str, Any]
        if self.psk_identity:
            options = {"ciphers": PSK_SUITES, "pre_shared_key": (self.psk_identity, self.psk_key)}
        else:
            certificate = mbedtls_x509.CRT.from_file(self.cert_file)
            key = mbedtls_pk.ECC.from_file(self.key_file)
            options = {"ciphers": CERT_SUITES, "certificate_chain": ((certificate,), key)}
        if stream:
            return tls.TLSConfiguration(
                validate_certificates=False,
                lowest_supported_version=tls.TLSVersion.TLSv1_2,
                highest_supported_version=tls.TLSVersion.TLSv1_2,
                **options,
            )
        return tls.DTLSConfiguration(
            validate_certificates=False, lowest_supported_version=tls.DTLSVersion.DTLSv1_2, **options
        )


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
