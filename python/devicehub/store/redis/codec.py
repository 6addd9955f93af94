"""Records as msgpack blobs (the same msgspec Structs every backend stores), and how ids join in one member."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

from devicehub.store.record_upgrades import decode

T = TypeVar("T")

encode = msgspec.msgpack.Encoder().encode


SEP = "\x1f"  # joins two ids inside one member; never part of an id, path or key


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else value


class DecodedRecords(Generic[T]):
    """Records decoded from their blobs, kept by the blob's bytes up to a bound (then all dropped at once).

    A directory page reads the same unchanged records call after call, and decoding a device with its resources is
    the page's main cost (issue 30 #5: 7.6 ms of 1 000 twelve-resource devices, against 0.24 ms to find them here).
    The bytes name their record exactly, so a kept record can never be stale; records are frozen, so sharing one
    instance between callers is safe."""

    def __init__(self, kind: type[T], capacity: int) -> None:
        self._kind = kind
        self._capacity = capacity
        self._kept: dict[Any, T] = {}
        # the kept record of a blob, or None: a directory page looks up 1 001 blobs, most of them kept, and a bound
        # dict.get is cheaper than a call of this object each (the dict is cleared, never replaced)
        self.kept = self._kept.get

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, data: bytes, record: T) -> None:
        """`record` is what `data` decodes to (the writer encoded it): a read of the blob finds it undecoded (issue 30
        #5: a registration batch's index step reads back the records it has just written)."""
        if len(self._kept) >= self._capacity:
            self._kept.clear()
        self._kept[data] = record

    def __call__(self, data: Any) -> T:  # bytes; redis-py types replies loosely
        record = self._kept.get(data)
        if record is None:
            if len(self._kept) >= self._capacity:
                self._kept.clear()  # cheaper than an LRU's bookkeeping on every hit; the next pages refill it
            record = self._kept[data] = decode(self._kind, data)
        return record
