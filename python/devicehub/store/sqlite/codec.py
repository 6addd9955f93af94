"""Records as msgpack blobs: the same msgspec Structs every backend stores."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from devicehub.domain.model import PresubscriptionRule

T = TypeVar("T")


encode = msgspec.msgpack.Encoder().encode

RULES = msgspec.msgpack.Decoder(list[PresubscriptionRule])

_DECODERS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}


def decode(kind: type[T], data: bytes) -> T:
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.msgpack.Decoder(kind)
    value: T = decoder.decode(data)
    return value
