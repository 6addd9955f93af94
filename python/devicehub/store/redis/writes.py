"""Many Redis writes as one command: the arguments of one call of lua/apply_writes.lua.

Issue 16: a registration batch in Redis mode queued a dozen commands per device in its MULTI (the record, its name,
each index, its seen-time, its snapshot paths and values), and redis-py packs each command and parses a reply for
each: 16.5 µs of the node's CPU per write against 4.6 µs as arguments of one script call
(`bench/micro/redis_writes_bench.py`, a real redis-server). The script runs inside the caller's MULTI, so what the
caller WATCHes still guards it.

Issue 30 #5: the operations travel as one msgpack argument, not one argument each. redis-py packs an argument in
Python (~0.75 µs each on this machine), and a first registration's device write had 50 of them (its values took
eight each); msgspec encodes the whole list in well under a microsecond, and the script unpacks it in C
(cmsgpack).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec


def _without_comments(script: str) -> str:
    """The script without its comments and indentation (none of its strings holds `--`): a reindex sends its text
    with each EVAL in a MULTI (3.3 kB with them, 2.0 kB without), and Redis hashes what it receives."""
    lines = (re.sub(r"\s+-- .*$", "", line).strip() for line in script.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("--")) + "\n"


APPLY_WRITES = _without_comments((Path(__file__).with_name("lua") / "apply_writes.lua").read_text())

_encode = msgspec.msgpack.Encoder().encode


def lua_bytes(value: bytes) -> msgspec.Raw:
    """`value` as a msgpack str, which Redis's cmsgpack unpacks to the same bytes (it refuses msgpack's bin types,
    which msgspec gives bytes)."""
    n = len(value)
    if n < 32:
        head = bytes((0xA0 | n,))
    elif n < 0x100:
        head = bytes((0xD9, n))
    elif n < 0x10000:
        head = b"\xda" + n.to_bytes(2, "big")
    else:
        head = b"\xdb" + n.to_bytes(4, "big")
    return msgspec.Raw(head + value)


def lua_args(values: Sequence[Any]) -> bytes:
    """One script argument holding `values` (str, int, float, msgspec.Raw from `lua_bytes`, lists of them), for
    `cmsgpack.unpack(ARGV[n])`."""
    return _encode(values)


def _value(value: str | bytes) -> Any:
    return lua_bytes(value) if isinstance(value, bytes) else value


class Writes:
    """Writes queued in order; `queue_on` adds them to a pipeline as one command. Every key goes in KEYS (issue 31 #2:
    Redis Cluster routes a script by its declared keys, and they must share one slot); an operation names its key by
    its position there."""

    __slots__ = ("_index", "args", "keys")

    def __init__(self) -> None:
        self.args: list[Any] = []  # the operations, flat: each its name then its arguments (apply_writes.lua)
        self.keys: list[str] = []
        self._index: dict[str, int] = {}

    def _key(self, key: str) -> int:
        index = self._index.get(key)
        if index is None:
            self.keys.append(key)
            index = self._index[key] = len(self.keys)
        return index

    def set(self, key: str, value: str | bytes) -> None:
        self.args += ("SET", self._key(key), _value(value))

    def swap(self, key: str, value: str | bytes) -> None:
        """SET that hands back the value it replaced: the script returns these, in order."""
        self.args += ("SWAP", self._key(key), _value(value))

    def delete(self, key: str, *more: str) -> None:
        """DEL of the keys (one operation)."""
        if more:
            self.args += ("DELS", [self._key(k) for k in (key, *more)])
        else:
            self.args += ("DEL", self._key(key))

    def zadd(self, key: str, member: str, score: float = 0, *, only_new: bool = False) -> None:
        self.args += ("ZADDNX" if only_new else "ZADD", self._key(key), score, member)

    def zadd_new(self, key: str, members: Iterable[str]) -> None:
        """ZADD NX of members at score 0 (one operation whatever their number); none: nothing."""
        members = list(members)
        if members:
            self.args += ("ZADDNXS", self._key(key), members)

    def zrem(self, key: str, member: str) -> None:
        self.args += ("ZREM", self._key(key), member)

    def sadd(self, key: str, member: str) -> None:
        self.args += ("SADD", self._key(key), member)

    def srem(self, key: str, member: str) -> None:
        self.args += ("SREM", self._key(key), member)

    def hset(self, key: str, field: str, value: bytes | str) -> None:
        self.args += ("HSET", self._key(key), field, _value(value))

    def hset_many(self, key: str, fields: dict[str, bytes]) -> None:
        """HSET of several fields (one operation); none: nothing."""
        if fields:
            pairs: list[Any] = []
            for field, value in fields.items():
                pairs += (field, lua_bytes(value))
            self.args += ("HSETS", self._key(key), pairs)

    def zadd_many(self, key: str, scores: dict[str, float]) -> None:
        """ZADD of several members with their scores (one operation); none: nothing."""
        if scores:
            pairs: list[Any] = []
            for member, score in scores.items():
                pairs += (score, member)
            self.args += ("ZADDS", self._key(key), pairs)

    def hdel(self, key: str, field: str) -> None:
        self.args += ("HDEL", self._key(key), field)

    def hincr(self, key: str, field: str) -> None:
        """HINCRBY of the field by 1."""
        self.args += ("HINCR", self._key(key), field)

    def check(self, key: str, field: str, expected: str) -> None:
        """Stop here (the script returns 0, nothing after is written) unless the hash field holds `expected` (''
        for no field). Queued first, it makes the writes conditional on what a read found, as a WATCH would, without
        the WATCH's round trip."""
        self.args += ("CHECK", self._key(key), field, expected)

    def script_args(self) -> tuple[Any, ...]:
        """The arguments of EVAL (on a cluster, routed by the keys: they must share one slot)."""
        return (APPLY_WRITES, len(self.keys), *self.keys, lua_args(self.args))

    def queue_on(self, tx: Any) -> None:
        # EVAL, not EVALSHA: inside a MULTI a script Redis forgot (a restart) would fail the whole EXEC; Redis keeps
        # the compiled script by its digest, so only the text (~1 kB) travels again
        if self.args:
            tx.eval(*self.script_args())


# devices per script call when a batch's writes go together (WriteGroups): a script holds Redis for its whole run,
# ~25 µs a device, so other clients wait at most ~1.6 ms behind one
GROUP_DEVICES = 64


class WriteGroups:
    """The script calls of a batch of devices' writes. On a Redis Cluster each device's writes are a call of their own
    (a script's keys share one slot, its device's); on one Redis the devices of a group share one call (issue 30 #5:
    redis-py spends ~12 µs of the node's CPU on each command of a pipeline besides its arguments, and Redis a few on
    each script run), which also makes the group's writes one atomic step, no weaker than one per device."""

    def __init__(self, *, merged: bool, size: int = GROUP_DEVICES) -> None:
        self._merged = merged
        self._size = size
        self._groups: list[Writes] = []
        self._in_last = size

    def next(self) -> Writes:
        """Where the next device's writes go."""
        if not self._merged or self._in_last >= self._size:
            self._groups.append(Writes())
            self._in_last = 0
        self._in_last += 1
        return self._groups[-1]

    def calls(self) -> list[tuple[Any, ...]]:
        return [writes.script_args() for writes in self._groups if writes.args]
