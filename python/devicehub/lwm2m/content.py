"""LwM2M content formats: CoAP numbers ↔ MIME names, and payloads flattened to resource-path → value.

The numbers and MIME names are the domain's vocabulary (domain/content_formats.py).
Spec: lwm2m-device-side.md §5 (formats, SenML labels, examples) and §6 (OMA-TLV).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import io
import math
from collections.abc import Callable, Iterable, Mapping

import cbor2
import msgspec

from devicehub._core import (
    TLV_MULTIPLE_RESOURCE,
    TLV_OBJECT_INSTANCE,
    TLV_RESOURCE,
    TLV_RESOURCE_INSTANCE,
    CborError,
    TlvError,
    TlvNode,
    lwm2m_cbor_decode,
    senml_cbor_decode,
    tlv_decode,
    tlv_encode,
    tlv_read_bool,
    tlv_read_float,
    tlv_read_int,
    tlv_read_objlnk,
)
from devicehub.domain.content_formats import (
    CBOR,
    LWM2M_CBOR,
    LWM2M_JSON,
    OCTET_STREAM,
    SENML_CBOR,
    SENML_JSON,
    TEXT,
    TLV,
    canonical_cf,
    mime_for,
)
from devicehub.domain.object_model import ObjectDefinition

__all__ = [
    "ContentError",
    "Value",
    "decode_values",
    "encode_text_value",
    "split_values",
]

Value = str | int | float | bool | bytes
"""One resource value: TLV and opaque give bytes (TLV has no types), text gives str, the typed
formats (JSON, SenML, CBOR) give int/float/bool/str/bytes as the device sent them."""

_MAX_ID = 65535


class ContentError(ValueError):
    """A payload that is malformed or in a content format devicehub cannot decode."""


def decode_values(cf: int | None, payload: bytes, base_path: str) -> dict[str, Value]:
    """Flatten a Read/Observe payload into {"/3303/0/5700": value, "/3/0/6/1": value, …}.

    `base_path` is the path that was read; single-value formats (text, opaque, CBOR) report
    under it and relative names in the other formats are taken below it. No Content-Format
    option means text/plain, the LwM2M default for a single resource.
    """
    base = _segments(base_path)
    if base is None:
        raise ContentError(f"invalid LwM2M path {base_path!r}")  # "/" is valid: Send (/dp) names are absolute
    decoder = _DECODERS.get(TEXT if cf is None else canonical_cf(cf))
    if decoder is None:
        raise ContentError(f"content format {cf} carries no resource values devicehub can decode")
    return decoder(payload, base)


def encode_text_value(value: Value) -> bytes:
    """A value as text/plain (spec §5): decimal numbers, "0"/"1" booleans, opaque as base64."""
    if isinstance(value, bool):
        return b"1" if value else b"0"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ContentError(f"{value} has no text/plain form")
        return repr(value).encode()
    if isinstance(value, bytes):
        return base64.b64encode(value)
    return value.encode()


# ---- paths -----------------------------------------------------------------------------------


def _segments(path: str) -> list[int] | None:
    """The ids of "/", "/O" … "/O/I/R/RI" (decimal ids ≤ 65535, "/" separated); None if invalid.

    Empty segments are dropped, so a SenML join of "/31024/10/" and "/1" still parses.
    """
    ids: list[int] = []
    for part in path.split("/"):
        if not part:
            continue
        if not (part.isascii() and part.isdigit()) or len(part) > 5 or int(part) > _MAX_ID:
            return None
        ids.append(int(part))
    return ids if len(ids) <= 4 else None


def _path(ids: Iterable[int]) -> str:
    return "".join(f"/{i}" for i in ids)


def _value_path(base: list[int]) -> str:
    """Where a single-value format (text, opaque, CBOR) reports: the read path, not the root."""
    if not base:
        raise ContentError("a single value needs an object, instance or resource path")
    return _path(base)


def _resolve(name: str, base: list[int]) -> str:
    """A SenML / LwM2M JSON name (bn + n already joined) as a path; relative names sit below base."""
    ids = _segments(name) if name.startswith("/") else _segments(_path(base) + "/" + name)
    if not ids:
        raise ContentError(f"record name {name!r} is not an LwM2M path")
    return _path(ids)


# ---- single values ---------------------------------------------------------------------------


def _text(payload: bytes, base: list[int]) -> dict[str, Value]:
    try:
        return {_value_path(base): payload.decode("utf-8")}
    except UnicodeDecodeError as exc:
        raise ContentError(f"text/plain payload is not UTF-8: {exc}") from exc


def _opaque(payload: bytes, base: list[int]) -> dict[str, Value]:
    return {_value_path(base): payload}


def _cbor_item(payload: bytes) -> object:
    """Exactly one CBOR data item; cbor2 raises a range of types on garbage, all become ContentError."""
    stream = io.BytesIO(payload)
    try:
        item = cbor2.CBORDecoder(stream).decode()
    except (cbor2.CBORError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise ContentError(f"malformed CBOR: {exc}") from exc
    if stream.tell() != len(payload):
        raise ContentError("trailing bytes after the CBOR item")
    return item


def _cbor(payload: bytes, base: list[int]) -> dict[str, Value]:
    item = _cbor_item(payload)
    if isinstance(item, datetime.datetime):
        # LwM2M 1.1 CBOR may tag a Time (tag 1); the resource type is Unix seconds.
        return {_value_path(base): int(item.timestamp())}
    if isinstance(item, (bool, int, float, str, bytes)):
        return {_value_path(base): item}
    raise ContentError(f"application/cbor payload is a {type(item).__name__}, not a single resource value")


# ---- OMA-TLV ---------------------------------------------------------------------------------

# How many path ids precede a TLV of each kind: /O before an instance, /O/I before a resource.
_TLV_PARENT_DEPTH = {TLV_OBJECT_INSTANCE: 1, TLV_MULTIPLE_RESOURCE: 2, TLV_RESOURCE: 2, TLV_RESOURCE_INSTANCE: 3}
_TLV_LEAVES = frozenset((TLV_RESOURCE, TLV_RESOURCE_INSTANCE))


def _tlv(payload: bytes, base: list[int]) -> dict[str, Value]:
    """Spec §6: a node's kind fixes its level, so `/3/0` answered by either an Object Instance 0 or
    a bare run of Resources gives the same paths; values stay bytes because TLV has no types."""
    try:
        nodes = tlv_decode(payload)
    except TlvError as exc:
        raise ContentError(f"malformed TLV: {exc}") from exc
    values: dict[str, Value] = {}
    for node in nodes:
        depth = _TLV_PARENT_DEPTH[node.kind]
        if len(base) < depth:
            raise ContentError(f"TLV of kind {node.kind} cannot answer a read of {_path(base)}")
        _flatten(node, _path(base[:depth]), values)
    return values


def _flatten(node: TlvNode, parent: str, values: dict[str, Value]) -> None:
    path = f"{parent}/{node.id}"
    if node.kind in _TLV_LEAVES:
        values[path] = node.value
        return
    for child in node.children:  # leaves inline: most children are resources, calls cost
        if child.kind in _TLV_LEAVES:
            values[f"{path}/{child.id}"] = child.value
        else:
            _flatten(child, path, values)


# ---- LwM2M JSON (11543) and SenML (110, 112) -------------------------------------------------


class _Lwm2mJsonRecord(msgspec.Struct, frozen=True):
    """One entry of the LwM2M 1.0 JSON `e` array."""

    n: str = ""
    v: int | float | None = None
    sv: str | None = None
    bv: bool | None = None
    ov: str | None = None  # objlnk "oid:iid"


class _Lwm2mJson(msgspec.Struct, frozen=True):
    e: list[_Lwm2mJsonRecord]
    bn: str = ""


class _SenmlRecord(msgspec.Struct, frozen=True):
    """RFC 8428 record fields LwM2M uses; `vlo` is LwM2M 1.1's objlnk value. Times are dropped:
    the latest record for a name wins. `vd` is base64url text in JSON (RFC 8428 §5); SenML CBOR is
    decoded by the Rust core (`senml_cbor_decode`)."""

    bn: str | None = None
    bv: int | float | None = None
    n: str = ""
    v: int | float | None = None
    vs: str | None = None
    vb: bool | None = None
    vd: str | None = None
    vlo: str | None = None


_lwm2m_json_decoder = msgspec.json.Decoder(_Lwm2mJson)
_senml_json_decoder = msgspec.json.Decoder(list[_SenmlRecord])


def _lwm2m_json(payload: bytes, base: list[int]) -> dict[str, Value]:
    try:
        document = _lwm2m_json_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise ContentError(f"malformed LwM2M JSON: {exc}") from exc
    values: dict[str, Value] = {}
    for record in document.e:
        value = _first_value(record.v, record.sv, record.bv, record.ov)
        if value is None:
            raise ContentError(f"LwM2M JSON record {record.n!r} has no value")
        values[_resolve(document.bn + record.n, base)] = value
    return values


def _senml_json(payload: bytes, base: list[int]) -> dict[str, Value]:
    try:
        records = _senml_json_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise ContentError(f"malformed SenML JSON: {exc}") from exc
    return _senml_values(records, base)


def _senml_cbor(payload: bytes, base: list[int]) -> dict[str, Value]:
    """RFC 8428 §6 via the Rust codec, which already joins bn + n and adds bv to v."""
    try:
        records = senml_cbor_decode(payload)
    except CborError as exc:
        raise ContentError(f"malformed SenML CBOR: {exc}") from exc
    return {_resolve(name, base): value for name, value in records}


def _lwm2m_cbor(payload: bytes, base: list[int]) -> dict[str, Value]:
    """Transport 1.2 §7.4.6: paths are absolute and must lie within the path that was read."""
    try:
        entries = lwm2m_cbor_decode(payload)
    except CborError as exc:
        raise ContentError(f"malformed LwM2M CBOR: {exc}") from exc
    values: dict[str, Value] = {}
    for ids, value in entries:
        if list(ids[: len(base)]) != base:
            raise ContentError(f"LwM2M CBOR value for {_path(ids)} does not answer a read of {_path(base)}")
        values[_path(ids)] = value
    return values


def _senml_values(records: Iterable[_SenmlRecord], base: list[int]) -> dict[str, Value]:
    """RFC 8428 §4.5: bn and bv carry over to later records; name = bn + n, numeric value = bv + v."""
    values: dict[str, Value] = {}
    base_name = ""
    base_value: int | float = 0
    for record in records:
        if record.bn is not None:
            base_name = record.bn
        if record.bv is not None:
            base_value = record.bv
        number = None if record.v is None else (record.v + base_value if base_value else record.v)
        value = _first_value(number, record.vs, record.vb, _base64url(record.vd), record.vlo)
        if value is None:
            continue  # a record without a value (e.g. sum only) names no resource value
        values[_resolve(base_name + record.n, base)] = value
    return values


def _first_value(*candidates: Value | None) -> Value | None:
    return next((c for c in candidates if c is not None), None)


def _base64url(text: str | None) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ContentError(f"SenML vd is not base64url: {exc}") from exc


_DECODERS: Mapping[int, Callable[[bytes, list[int]], dict[str, Value]]] = {
    TEXT: _text,
    OCTET_STREAM: _opaque,
    CBOR: _cbor,
    TLV: _tlv,
    LWM2M_JSON: _lwm2m_json,
    SENML_JSON: _senml_json,
    SENML_CBOR: _senml_cbor,
    LWM2M_CBOR: _lwm2m_cbor,
}


_MULTI_VALUE = frozenset((TLV, SENML_JSON, SENML_CBOR, LWM2M_JSON, LWM2M_CBOR))
_TLV_MIME = mime_for(TLV)
_TEXT_MIME = mime_for(TEXT)


def split_values(
    path: str,
    content_format: int | None,
    payload: bytes,
    content_type: str,
    definition: ObjectDefinition | None = None,
) -> list[tuple[str, bytes, str]]:
    """spec §2.4 keeps values per resource: an object or instance report (TLV, SenML, LwM2M JSON/CBOR) is split.

    TLV values have no type without the object model: a value of a resource `definition` (the object's model)
    types becomes text/plain (issue 32 #1: 4 bytes are an Integer or a Float only by the model), any other is kept
    as a one-resource TLV; typed formats become text/plain. A payload that does not decode is kept whole.
    """
    if content_format is None or canonical_cf(content_format) not in _MULTI_VALUE:
        return [(path, payload, content_type)]
    try:
        values = decode_values(content_format, payload, path)
    except ContentError:
        return [(path, payload, content_type)]
    split: list[tuple[str, bytes, str]] = []
    for resource_path, value in values.items():
        if canonical_cf(content_format) == TLV:
            typed = _typed_tlv(definition, resource_path, value) if definition is not None else None
            if typed is not None:
                split.append((resource_path, typed, _TEXT_MIME))
                continue
            kind = TLV_RESOURCE_INSTANCE if resource_path.count("/") == 4 else TLV_RESOURCE
            node = TlvNode(kind, int(resource_path.rsplit("/", 1)[1]), value if isinstance(value, bytes) else b"")
            split.append((resource_path, tlv_encode([node]), _TLV_MIME))
        else:
            try:
                split.append((resource_path, encode_text_value(value), _TEXT_MIME))
            except ContentError:
                continue
    return split


def _typed_tlv(definition: ObjectDefinition, resource_path: str, value: Value) -> bytes | None:
    """A TLV value as text/plain by its resource's type (Core §7.4.3, Appendix C), None when the model does not
    type it (unknown resource, Opaque, Corelnk) or the bytes do not fit the type (then kept as TLV)."""
    resource = definition.resource(int(resource_path.split("/")[3]))
    if resource is None or not isinstance(value, bytes):
        return None
    try:
        kind = resource.type
        if kind in ("integer", "time"):
            return encode_text_value(tlv_read_int(value))
        if kind == "unsigned integer" and len(value) in (1, 2, 4, 8):
            return encode_text_value(int.from_bytes(value, "big"))
        if kind == "float":
            return encode_text_value(tlv_read_float(value))
        if kind == "boolean":
            return encode_text_value(tlv_read_bool(value))
        if kind == "string":
            value.decode("utf-8")
            return value
        if kind == "objlnk":
            object_id, instance_id = tlv_read_objlnk(value)
            return f"{object_id}:{instance_id}".encode()
    except (TlvError, ValueError, ContentError):  # UnicodeDecodeError is a ValueError
        return None
    return None
