"""Many Redis writes as one command: the arguments of one call of lua/apply_writes.lua.

Issue 16: a registration batch in Redis mode queued a dozen commands per device in its MULTI (the record, its name,
each index, its seen-time, its snapshot paths and values), and redis-py packs each command and parses a reply for
each: 16.5 µs of the node's CPU per write against 4.6 µs as arguments of one script call
(`bench/micro/redis_writes_bench.py`, a real redis-server). The script runs inside the caller's MULTI, so what the
caller WATCHes still guards it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devicehub.store.redis.codec import SEP

APPLY_WRITES = (Path(__file__).with_name("lua") / "apply_writes.lua").read_text()


class Writes:
    """Writes queued in order; `queue_on` adds them to a pipeline as one command. Every key goes in KEYS (issue 31 #2:
    Redis Cluster routes a script by its declared keys, and they must share one slot); an operation names its key by
    its position there."""

    __slots__ = ("_index", "args", "keys")

    def __init__(self) -> None:
        self.args: list[str | bytes | float | int] = []
        self.keys: list[str] = []
        self._index: dict[str, int] = {}

    def _key(self, key: str) -> int:
        index = self._index.get(key)
        if index is None:
            self.keys.append(key)
            index = self._index[key] = len(self.keys)
        return index

    def set(self, key: str, value: str | bytes) -> None:
        self.args += ("SET", self._key(key), value)

    def swap(self, key: str, value: str | bytes) -> None:
        """SET that hands back the value it replaced: the script returns these, in order."""
        self.args += ("SWAP", self._key(key), value)

    def delete(self, key: str) -> None:
        self.args += ("DEL", self._key(key))

    def zadd(self, key: str, member: str, score: float = 0, *, only_new: bool = False) -> None:
        self.args += ("ZADDNX" if only_new else "ZADD", self._key(key), score, member)

    def zadd_new(self, key: str, members: Sequence[str]) -> None:
        """ZADD NX of members at score 0, as one argument (their SEP-joined text); none: nothing."""
        if members:
            self.args += ("ZADDNXS", self._key(key), SEP.join(members))

    def zrem(self, key: str, member: str) -> None:
        self.args += ("ZREM", self._key(key), member)

    def sadd(self, key: str, member: str) -> None:
        self.args += ("SADD", self._key(key), member)

    def srem(self, key: str, member: str) -> None:
        self.args += ("SREM", self._key(key), member)

    def hset(self, key: str, field: str, value: bytes | str) -> None:
        self.args += ("HSET", self._key(key), field, value)

    def hdel(self, key: str, field: str) -> None:
        self.args += ("HDEL", self._key(key), field)

    def script_args(self) -> tuple[Any, ...]:
        """The arguments of EVAL (on a cluster, routed by the keys: they must share one slot)."""
        return (APPLY_WRITES, len(self.keys), *self.keys, *self.args)

    def queue_on(self, tx: Any) -> None:
        # EVAL, not EVALSHA: inside a MULTI a script Redis forgot (a restart) would fail the whole EXEC; Redis keeps
        # the compiled script by its digest, so only the text (~1 kB) travels again
        if self.args:
            tx.eval(*self.script_args())
