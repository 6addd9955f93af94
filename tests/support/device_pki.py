"""A throw-away PKI for DTLS tests: a CA, device certificates issued by it (valid, expired), PEM files."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Issued:
    cert_file: Path
    key_file: Path
    pem: bytes


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class TestCa:
    __test__ = False  # not a test class

    def __init__(self, directory: Path, name: str = "Test Device CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = self.certificate.public_bytes(Encoding.PEM)

    def issue(self, cn: str, *, expired: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        start, end = (
            (now - timedelta(days=10), now - timedelta(days=1))
            if expired
            else (now - timedelta(hours=1), now + timedelta(days=7))
        )
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .sign(self.key, hashes.SHA256())
        )
        stem = self.directory / (cn + ("-expired" if expired else ""))
        cert_file, key_file = stem.with_suffix(".pem"), stem.with_suffix(".key")
        pem = certificate.public_bytes(Encoding.PEM)
        cert_file.write_bytes(pem)
        key_file.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.TraditionalOpenSSL, NoEncryption()))
        return Issued(cert_file, key_file, pem)
