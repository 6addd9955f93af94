"""Records as msgpack blobs (the same msgspec Structs every backend stores), and how ids join in one member."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

encode = msgspec.msgpack.Encoder().encode

_DECODERS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}

SEP = "\x1f"  # joins two ids inside one member; never part of an id, path or key


def decode(kind: type[T], data: Any) -> T:  # redis-py types replies loosely; they are bytes here
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.msgpack.Decoder(kind)
    value: T = decoder.decode(data)
    return value


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else value
