"""Stored records as msgpack blobs read into today's model, those written in an earlier encoding too (the same rules
for both backends)."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from devicehub.domain.model import Registration

# before issue 29 #3 a registration record kept each link as an array of these fields (its own class, array-like);
# the one link class of the model is kept as a map, so a record from then is read by naming each array's fields
_LINK_FIELDS = ("path", "rt", "ct", "obs", "iface", "aobs")

T = TypeVar("T")

_DECODERS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}


def decode(kind: type[T], data: Any) -> T:  # bytes; redis-py types its replies loosely
    """A stored blob as a `kind`: today's encoding, or an earlier one `upgraded` knows."""
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.msgpack.Decoder(kind)
    try:
        value: T = decoder.decode(data)
    except msgspec.ValidationError:
        value = upgraded(kind, data)  # a record of an earlier encoding, or not ours at all
        if value is None:
            raise
    return value


def upgraded(kind: type[Any], data: bytes) -> Any:
    """`data` as a `kind` when it is a record of an earlier encoding, or None when it is not one (the caller raises
    its own error)."""
    if kind is not Registration:
        return None
    raw = msgspec.msgpack.decode(data)
    if not isinstance(raw, dict) or not isinstance(raw.get("links"), list):
        return None
    raw["links"] = [
        dict(zip(_LINK_FIELDS, link, strict=False)) if isinstance(link, list) else link for link in raw["links"]
    ]
    return msgspec.convert(raw, Registration)
