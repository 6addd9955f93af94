"""The content-format vocabulary: CoAP content-format numbers ↔ the MIME names the API shows (spec §5)."""

from __future__ import annotations

TEXT = 0
LINK_FORMAT = 40
OCTET_STREAM = 42
JSON = 50
CBOR = 60
SENML_JSON = 110
SENML_CBOR = 112
TLV = 11542
LWM2M_JSON = 11543
LWM2M_CBOR = 11544
LEGACY_TLV = 99  # Mbed's number for TLV (spec §5)

# spec §5: Mbed sends TLV as 99; Wakaama accepts the pre-registration numbers 1541-1544.
_ALIASES: dict[int, int] = {LEGACY_TLV: TLV, 1541: TEXT, 1542: TLV, 1543: LWM2M_JSON, 1544: OCTET_STREAM}

_MIME: dict[int, str] = {
    TEXT: "text/plain",
    LINK_FORMAT: "application/link-format",
    OCTET_STREAM: "application/octet-stream",
    JSON: "application/json",
    CBOR: "application/cbor",
    SENML_JSON: "application/senml+json",
    SENML_CBOR: "application/senml+cbor",
    TLV: "application/vnd.oma.lwm2m+tlv",
    LWM2M_JSON: "application/vnd.oma.lwm2m+json",
    LWM2M_CBOR: "application/vnd.oma.lwm2m+cbor",
}
_CF: dict[str, int] = {mime: cf for cf, mime in _MIME.items()}


def canonical_cf(cf: int) -> int:
    """The registered number for a legacy alias (99 and 1542 → 11542, …); others unchanged."""
    return _ALIASES.get(cf, cf)


def mime_for(cf: int | None) -> str:
    """The MIME name Pelion's API shows for a content format; none means text (CoAP's default), unknown opaque."""
    if cf is None:
        return _MIME[TEXT]
    return _MIME.get(canonical_cf(cf), _MIME[OCTET_STREAM])


def cf_for(mime: str) -> int | None:
    """The content-format number of a MIME name (parameters and case ignored); None if unknown."""
    return _CF.get(mime.split(";", 1)[0].strip().lower())


def known_cf(mime: str) -> int | None:
    """The content-format number of a MIME name devicehub can put in a request, or a decimal number
    ("11544") naming one; None for anything else, so the API refuses it rather than send no option."""
    text = mime.strip()
    if text.isascii() and text.isdigit() and len(text) <= 5:
        cf = canonical_cf(int(text))
        return cf if cf in _MIME else None
    return cf_for(text)
