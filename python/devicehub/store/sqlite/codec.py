"""Records as msgpack blobs: the same msgspec Structs every backend stores."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from devicehub.domain.model import PresubscriptionRule
from devicehub.store.record_upgrades import upgraded

T = TypeVar("T")


encode = msgspec.msgpack.Encoder().encode

RULES = msgspec.msgpack.Decoder(list[PresubscriptionRule])

_DECODERS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}


def decode(kind: type[T], data: bytes) -> T:
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.msgpack.Decoder(kind)
    try:
        value: T = decoder.decode(data)
    except msgspec.ValidationError:
        value = upgraded(kind, data)  # a record of an earlier encoding (record_upgrades.py), or not ours at all
        if value is None:
            raise
    return value
