"""Manifests made by ARM's `manifest-tool` (PyPI, `manifest-tool create`, schema v3): DER read into `ParsedManifest`.

The schema (manifest-tool `mtool/asn1/v3`): SignedResource ::= SEQUENCE { manifest-version ENUMERATED (3),
manifest SEQUENCE { vendor-id OCTET STRING, class-id OCTET STRING, update-priority INTEGER, component-name
UTF8String, payload-version UTF8String, payload-digest OCTET STRING, payload-size INTEGER, payload-uri UTF8String,
payload-format ENUMERATED, installed-signature OCTET STRING, … }, signature OCTET STRING }. A small DER reader
instead of the tool itself: manifest-tool pins cryptography, jsonschema and requests to versions the service's
other dependencies refuse. The signature is kept, not verified (devices verify it with their update certificate).
"""

from __future__ import annotations

from devicehub.domain.firmware_model import ParsedManifest
from devicehub.errors import FieldError, ValidationFailed

MAX_MANIFEST = 16 * 1024
_FORMATS = {1: "raw-binary", 5: "arm-patch-stream", 6: "combined", 257: "encrypted-raw", 262: "encrypted-combined"}
SEQUENCE, INTEGER, OCTETS, UTF8, ENUMERATED = 0x30, 0x02, 0x04, 0x0C, 0x0A


class _Bad(Exception):
    pass


def _read(data: bytes, at: int) -> tuple[int, bytes, int]:
    """One DER TLV at `at`: (tag, value, offset after it); definite lengths only (X.690 §10.1)."""
    if at + 2 > len(data):
        raise _Bad("truncated")
    tag, first = data[at], data[at + 1]
    at += 2
    if first & 0x80:
        count = first & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise _Bad("bad length")
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    else:
        length = first
    if at + length > len(data):
        raise _Bad("truncated")
    return tag, data[at : at + length], at + length


def _items(data: bytes) -> list[tuple[int, bytes]]:
    items, at = [], 0
    while at < len(data):
        tag, value, at = _read(data, at)
        items.append((tag, value))
    return items


def _expect(item: tuple[int, bytes], tag: int, name: str) -> bytes:
    if item[0] != tag:
        raise _Bad(f"{name}: tag 0x{item[0]:02x}, expected 0x{tag:02x}")
    return item[1]


def _int(value: bytes) -> int:
    return int.from_bytes(value, "big", signed=True)


def parse_manifest(data: bytes) -> ParsedManifest:
    """The manifest's fields; ValidationFailed (400) naming what is wrong for anything else."""
    try:
        if len(data) > MAX_MANIFEST:
            raise _Bad(f"larger than {MAX_MANIFEST} bytes")
        tag, body, end = _read(data, 0)
        if tag != SEQUENCE or end != len(data):
            raise _Bad("not one DER SEQUENCE")
        top = _items(body)
        if len(top) != 3:
            raise _Bad("SignedResource must hold version, manifest and signature")
        version = _int(_expect(top[0], ENUMERATED, "manifest-version"))
        if version != 3:
            raise _Bad(f"manifest-version {version}: only v3 (manifest-tool create) is read")
        fields = _items(_expect(top[1], SEQUENCE, "manifest"))
        if len(fields) < 10:
            raise _Bad("manifest has fewer than its 10 mandatory fields")
        tags = (OCTETS, OCTETS, INTEGER, UTF8, UTF8, OCTETS, INTEGER, UTF8, ENUMERATED, OCTETS)
        names = (
            "vendor-id",
            "class-id",
            "update-priority",
            "component-name",
            "payload-version",
            "payload-digest",
            "payload-size",
            "payload-uri",
            "payload-format",
            "installed-signature",
        )
        values = [_expect(fields[i], tags[i], names[i]) for i in range(10)]
        signature = _expect(top[2], OCTETS, "signature")
        size = _int(values[6])
        if size < 0 or len(values[5]) != 32:
            raise _Bad("payload-size negative or payload-digest not a sha256")
        return ParsedManifest(
            manifest_version=version,
            vendor_id=values[0].hex(),
            class_id=values[1].hex(),
            update_priority=_int(values[2]),
            component_name=values[3].decode(),
            payload_version=values[4].decode(),
            payload_digest=values[5].hex(),
            payload_size=size,
            payload_uri=values[7].decode(),
            payload_format=_FORMATS.get(_int(values[8]), str(_int(values[8]))),
            signature_size=len(signature),
        )
    except (_Bad, UnicodeDecodeError) as error:
        raise ValidationFailed(
            f"datafile is not a manifest-tool manifest: {error}", fields=(FieldError("datafile", str(error)),)
        ) from None
