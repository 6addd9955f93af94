"""Many Redis writes as one command: the arguments of one call of lua/apply_writes.lua.

Issue 16: a registration batch in Redis mode queued a dozen commands per device in its MULTI (the record, its name,
each index, its seen-time, its snapshot paths and values), and redis-py packs each command and parses a reply for
each: 16.5 µs of the node's CPU per write against 4.6 µs as arguments of one script call
(`bench/micro/redis_writes_bench.py`, a real redis-server). The script runs inside the caller's MULTI, so what the
caller WATCHes still guards it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

APPLY_WRITES = (Path(__file__).with_name("lua") / "apply_writes.lua").read_text()


class Writes:
    """Writes queued in order; `queue_on` adds them to a pipeline as one command."""

    __slots__ = ("args",)

    def __init__(self) -> None:
        self.args: list[str | bytes | float] = []

    def set(self, key: str, value: str | bytes) -> None:
        self.args += ("SET", key, value)

    def delete(self, key: str) -> None:
        self.args += ("DEL", key)

    def zadd(self, key: str, member: str, score: float = 0, *, only_new: bool = False) -> None:
        self.args += ("ZADDNX" if only_new else "ZADD", key, score, member)

    def zrem(self, key: str, member: str) -> None:
        self.args += ("ZREM", key, member)

    def sadd(self, key: str, member: str) -> None:
        self.args += ("SADD", key, member)

    def srem(self, key: str, member: str) -> None:
        self.args += ("SREM", key, member)

    def hset(self, key: str, field: str, value: bytes) -> None:
        self.args += ("HSET", key, field, value)

    def queue_on(self, tx: Any) -> None:
        # EVAL, not EVALSHA: inside a MULTI a script Redis forgot (a restart) would fail the whole EXEC; Redis keeps
        # the compiled script by its digest, so only the text (~1 kB) travels again
        if self.args:
            tx.eval(APPLY_WRITES, 0, *self.args)
