"""Records as msgpack blobs: the same msgspec Structs every backend stores."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from devicehub.domain.model import PresubscriptionRule

T = TypeVar("T")


encode = msgspec.msgpack.Encoder().encode

RULES = msgspec.msgpack.Decoder(list[PresubscriptionRule])
