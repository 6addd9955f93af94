"""Commands packed by hiredis (store/redis/packing.py): the same bytes as redis-py's own Python packer, the same error
for what neither sends, and the twin class of each kind of connection a Redis URL names."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from devicehub.store.redis.packing import HiredisConnection, HiredisSSLConnection, HiredisUnixConnection, packing

# what the store sends: script calls with blobs, scores and counts, key lists, multi-word commands, text beyond ASCII
COMMANDS: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 2, "dh:device:{dev:1}", "dh:snap:{dev:1}", b"\x93\x00\xff\x1f", 1.5, -3, 0.1 + 0.2),
    ("MGET", *(f"dh:device:{{dev:{n:032x}}}" for n in range(1001))),
    ("HSET", "dh:blob", "k", b"x" * 70_000),  # past redis-py's 6 000-byte chunking
    ("ZADD", "dh:seen:{seen:03}", 1.7e9, "d1", float("inf"), "d2", 2**70, "d3"),
    ("CONFIG GET", "maxmemory"),
    ("SET", "dh:name:{ep:capteur-é}", "", "PX", 500),
    ("SET", "k", memoryview(b"view"), "GET", bytearray(b"array")),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_hiredis_packs_the_bytes_redis_py_packs(command: tuple[Any, ...]) -> None:
    assert b"".join(HiredisConnection().pack_command(*command)) == b"".join(Connection().pack_command(*command))


@pytest.mark.parametrize("value", [True, None, object()])
def test_what_redis_py_refuses_to_send_hiredis_refuses_with_the_same_error(value: object) -> None:
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", value)  # type: ignore[arg-type]
    with pytest.raises(DataError):
        HiredisConnection().pack_command("SET", "k", value)  # type: ignore[arg-type]


def test_each_kind_of_connection_has_its_hiredis_twin() -> None:
    assert packing(Connection) is HiredisConnection
    assert packing(SSLConnection) is HiredisSSLConnection
    assert packing(UnixDomainSocketConnection) is HiredisUnixConnection
    assert packing(HiredisConnection) is HiredisConnection  # a class of its own (or one it does not know) is kept
