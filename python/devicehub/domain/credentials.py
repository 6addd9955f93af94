"""Device credentials (issue 13 #3): pre-shared keys (Pelion `device-shared-keys`) and trusted CA certificates.

An endpoint name belongs to one account: the one it is enrolled into (issue 28 #1). Creating a pre-shared key enrols
its name into the key's account, and is refused (409) when the name belongs to another account; deleting the key
leaves the name enrolled. A device proving a trusted CA's certificate registers only when its common name is
enrolled into that CA's account or nowhere (its first Register then enrols it there): `Store.admit_authenticated`.

Secrets are sealed with AES-GCM under a node key read from `--secret-key-file` (made, mode 0600, when absent)
before they reach the store; the DTLS listener gets the opened keys through `snapshot()` and is told of every
change through the listeners, so revoking a key or a CA ends that device's sessions (issue 13 #4).
"""

from __future__ import annotations

import hashlib
import os
import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding

from devicehub.clock import Clock
from devicehub.domain.model import DeviceSharedKey, TrustedCa
from devicehub.domain.storage.store import Store
from devicehub.errors import Conflict, FieldError, NotFound, ValidationFailed
from devicehub.private_files import write_private

MIN_NAME, MAX_NAME = 16, 64  # Pelion: 16-64 printable ASCII characters
MIN_SECRET, MAX_SECRET = 16, 64  # 128-512 bits
MAX_CA_PEM = 16_384
_PRINTABLE = set(string.printable) - set("\t\n\r\x0b\x0c")
_NONCE = 12


def load_secret_key(path: Path) -> bytes:
    """The node's 256-bit sealing key; made (random, mode 0600) when the file does not exist."""
    if path.exists():
        key = bytes.fromhex(path.read_text().strip())
        if len(key) != 32:
            raise ValueError(f"{path}: expected 64 hex digits (a 256-bit key)")
        return key
    key = AESGCM.generate_key(bit_length=256)
    # of nodes sharing a data directory that start together one key wins and the others read it (issue 31)
    if not write_private(path, key.hex() + "\n", replace=False):
        return load_secret_key(path)
    return key


class SecretBox:
    """AES-256-GCM sealing of secrets at rest; the endpoint name is bound in as associated data."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, secret: bytes, label: str) -> bytes:
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, secret, label.encode())

    def open(self, sealed: bytes, label: str) -> bytes:
        return self._aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], label.encode())


@dataclass(frozen=True, slots=True)
class PskEntry:
    key: bytes
    account_id: str


@dataclass(frozen=True, slots=True)
class TrustedAuthority:
    ca_id: str
    account_id: str
    certificate: x509.Certificate


def parse_endpoint_name(name: object) -> str:
    if not isinstance(name, str) or not MIN_NAME <= len(name) <= MAX_NAME or not set(name) <= _PRINTABLE:
        got = f"{len(name)} characters" if isinstance(name, str) else type(name).__name__
        raise ValidationFailed(
            f"invalid endpoint_name: a PSK identity is {MIN_NAME}-{MAX_NAME} printable ASCII characters (got {got})",
            fields=(FieldError("endpoint_name", f"{MIN_NAME}-{MAX_NAME} printable ASCII characters"),),
        )
    return name


def parse_secret_hex(text: object) -> bytes:
    """Case-insensitive hex with an optional 0x, 128-512 bits."""
    problem = FieldError("secret_hex", f"hexadecimal, {MIN_SECRET * 8}-{MAX_SECRET * 8} bits, optional 0x")
    if not isinstance(text, str):
        raise ValidationFailed("invalid secret_hex", fields=(problem,))
    digits = text[2:] if text[:2].lower() == "0x" else text
    if len(digits) % 2 or not all(c in string.hexdigits for c in digits):
        raise ValidationFailed("invalid secret_hex", fields=(problem,))
    secret = bytes.fromhex(digits)
    if not MIN_SECRET <= len(secret) <= MAX_SECRET:
        raise ValidationFailed("invalid secret_hex", fields=(problem,))
    return secret


def parse_ca(pem: str | bytes, now: float) -> x509.Certificate:
    data = pem.encode() if isinstance(pem, str) else pem
    problem = (FieldError("certificate", "one PEM CA certificate, valid now"),)
    if len(data) > MAX_CA_PEM:
        raise ValidationFailed("certificate too large", fields=problem)
    try:
        certificate = x509.load_pem_x509_certificate(data)
    except ValueError:
        raise ValidationFailed("not a PEM certificate", fields=problem) from None
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:  # RFC 5280 §4.2.1.9: a CA certificate says so
        raise ValidationFailed("not a CA certificate (no basicConstraints CA:TRUE)", fields=problem)
    if certificate.not_valid_after_utc.timestamp() < now:
        raise ValidationFailed("the certificate has expired", fields=problem)
    return certificate


Listener = Callable[[], Awaitable[None]]


class CredentialService:
    """What the REST routes and the CLI call; each call is scoped to one account."""

    def __init__(self, store: Store, clock: Clock, box: SecretBox) -> None:
        self._store = store
        self._clock = clock
        self._box = box
        self._listeners: list[Listener] = []

    def on_change(self, listener: Listener) -> None:
        self._listeners.append(listener)

    async def _changed(self) -> None:
        for listener in self._listeners:
            await listener()

    # ---- pre-shared keys ------------------------------------------------------------------------------
    async def add_psk(self, account_id: str, endpoint_name: object, secret_hex: object) -> DeviceSharedKey:
        name = parse_endpoint_name(endpoint_name)
        secret = parse_secret_hex(secret_hex)
        record = DeviceSharedKey(
            endpoint_name=name,
            account_id=account_id,
            sealed_secret=self._box.seal(secret, name),
            created_at=self._clock.now(),
        )
        claim = await self._store.create_shared_key(record)
        if claim == "exists":
            raise Conflict(f"this account has a pre-shared key for {name}; delete it first")
        if claim == "taken":  # issue 28 #1: says no more than that the name is not this account's to take
            raise Conflict(f"endpoint name {name} is not available to this account")
        await self._changed()
        return record

    async def get_psk(self, account_id: str, endpoint_name: str) -> DeviceSharedKey:
        record = await self._store.get_shared_key(endpoint_name)
        if record is None or record.account_id != account_id:
            raise NotFound(f"no pre-shared key for {endpoint_name}")
        return record

    async def list_psks(self, account_id: str, *, after: str | None, limit: int) -> list[DeviceSharedKey]:
        return await self._store.list_shared_keys(account_id, after=after, limit=limit)

    async def delete_psk(self, account_id: str, endpoint_name: str) -> None:
        await self.get_psk(account_id, endpoint_name)
        await self._store.delete_shared_key(endpoint_name)
        await self._changed()

    # ---- trusted CAs ----------------------------------------------------------------------------------
    async def add_ca(self, account_id: str, name: str, pem: str | bytes) -> TrustedCa:
        certificate = parse_ca(pem, self._clock.now())
        fingerprint = hashlib.sha256(certificate.public_bytes(Encoding.DER)).hexdigest()
        record = TrustedCa(
            id=hashlib.sha256(f"{account_id}:{fingerprint}".encode()).hexdigest()[:32],
            account_id=account_id,
            name=name[:100],
            pem=certificate.public_bytes(Encoding.PEM).decode(),
            subject=certificate.subject.rfc4514_string(),
            not_after=certificate.not_valid_after_utc.timestamp(),
            created_at=self._clock.now(),
        )
        await self._store.put_trusted_ca(record)
        await self._changed()
        return record

    async def list_cas(self, account_id: str) -> list[TrustedCa]:
        return await self._store.list_trusted_cas(account_id)

    async def remove_ca(self, account_id: str, ca_id: str) -> None:
        if not any(ca.id == ca_id for ca in await self._store.list_trusted_cas(account_id)):
            raise NotFound(f"no trusted certificate {ca_id}")
        await self._store.delete_trusted_ca(ca_id)
        await self._changed()

    # ---- for the DTLS listener -------------------------------------------------------------------------
    async def snapshot(self) -> tuple[dict[str, PskEntry], list[TrustedAuthority]]:
        """Every opened key by identity, and every trusted CA (all accounts)."""
        keys: dict[str, PskEntry] = {}
        after: str | None = None
        while True:
            page = await self._store.list_shared_keys(None, after=after, limit=1000)
            for record in page:
                keys[record.endpoint_name] = PskEntry(
                    self._box.open(record.sealed_secret, record.endpoint_name), record.account_id
                )
            if len(page) < 1000:
                break
            after = page[-1].endpoint_name
        authorities = [
            TrustedAuthority(ca.id, ca.account_id, x509.load_pem_x509_certificate(ca.pem.encode()))
            for ca in await self._store.list_trusted_cas()
        ]
        return keys, authorities
