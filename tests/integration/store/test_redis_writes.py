"""Many Redis writes as one script call (store/redis/writes.py, lua/apply_writes.lua), against a real redis-server."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from devicehub.store.redis.writes import APPLY_WRITES, Writes, lua_args

pytestmark = pytest.mark.redis


_prefixes = itertools.count()
Key = Callable[[str], str]


def _run(redis_url: str, scenario: Callable[[aioredis.Redis, Key], Awaitable[None]]) -> None:
    """`scenario` with a client and its own key names (the server is shared with the other store tests)."""
    prefix = f"writes{next(_prefixes)}:"

    async def main() -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            await scenario(client, lambda name: prefix + name)
        finally:
            await client.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_every_write_is_applied_in_order_inside_the_callers_transaction(redis_url: str) -> None:
    """Each operation does what its Redis command does, in the order queued (a later write to a key wins), and the
    whole list is one command of the MULTI."""

    async def scenario(client: aioredis.Redis, k: Key) -> None:
        await client.set(k("gone"), "x")
        await client.set(k("gone2"), "x")
        await client.set(k("gone3"), "x")
        await client.sadd(k("set"), "a", "b")
        await client.zadd(k("nx"), {"m": 5})
        writes = Writes()
        writes.set(k("k"), b"first")
        writes.set(k("k"), b"second")
        writes.delete(k("gone"))
        writes.delete(k("gone2"), k("gone3"))  # one DEL of both
        writes.zadd(k("z"), "m1", 1.5)
        writes.zadd(k("z"), "m2")
        writes.zrem(k("z"), "m2")
        writes.zadd(k("nx"), "m", 9, only_new=True)  # kept: NX leaves an existing member's score
        writes.zadd(k("nx"), "new", 2, only_new=True)
        writes.srem(k("set"), "a")
        writes.sadd(k("set"), "c")
        writes.hset(k("h"), "f", b"\x00\xff")
        async with client.pipeline(transaction=True) as tx:
            writes.queue_on(tx)
            assert len(tx.command_stack) == 1
            await tx.execute()
        assert await client.get(k("k")) == b"second"
        assert await client.exists(k("gone"), k("gone2"), k("gone3")) == 0
        assert await client.zrange(k("z"), 0, -1, withscores=True) == [(b"m1", 1.5)]
        assert await client.zrange(k("nx"), 0, -1, withscores=True) == [(b"new", 2.0), (b"m", 5.0)]
        assert await client.smembers(k("set")) == {b"b", b"c"}
        assert await client.hgetall(k("h")) == {b"f": b"\x00\xff"}

    _run(redis_url, scenario)


def test_an_empty_list_sends_nothing_and_a_malformed_one_is_refused(redis_url: str) -> None:
    """No command for no writes; an unknown operation or a missing argument is a script error, not a wrong write."""

    async def scenario(client: aioredis.Redis, k: Key) -> None:
        async with client.pipeline(transaction=True) as tx:
            Writes().queue_on(tx)
            assert tx.command_stack == []
        with pytest.raises(ResponseError, match="unknown operation"):
            await client.eval(APPLY_WRITES, 1, k("k"), lua_args(["INCR", 1]))
        with pytest.raises(ResponseError, match="lacks arguments"):
            await client.eval(APPLY_WRITES, 1, k("k"), lua_args(["SET", 1]))
        with pytest.raises(ResponseError, match="names no declared key"):
            await client.eval(APPLY_WRITES, 1, k("k"), lua_args(["SET", 2, "v"]))
        with pytest.raises(ResponseError, match="not a msgpack list"):
            await client.eval(APPLY_WRITES, 1, k("k"), "SET")
        assert await client.exists(k("k")) == 0

    _run(redis_url, scenario)


def test_many_new_members_are_one_argument_and_keep_existing_scores(redis_url: str) -> None:
    """Issue 30 #5: a device's resource paths go as one argument (ZADDNXS); each is added at score 0 unless it is
    there (its score kept), however many (more than the script's chunk of 500), and none is no write at all."""

    async def scenario(client: aioredis.Redis, k: Key) -> None:
        await client.zadd(k("paths"), {"/3/0/0": 7})
        members = ["/3/0/0", "/3/0/1", *(f"/1000/{i}/0" for i in range(1200))]
        writes = Writes()
        writes.zadd_new(k("paths"), members)
        writes.zadd_new(k("none"), [])
        assert len(writes.args) == 3  # one operation for all the members
        await client.eval(*writes.script_args())
        assert await client.zcard(k("paths")) == len(members)
        assert await client.zscore(k("paths"), "/3/0/0") == 7
        assert await client.zscore(k("paths"), "/1000/1199/0") == 0
        assert await client.exists(k("none")) == 0

    _run(redis_url, scenario)


def test_the_operations_are_one_argument_and_any_bytes_arrive_unchanged(redis_url: str) -> None:
    """Issue 30 #5: the whole list is one script argument (msgpack), so the client packs one argument, not one per
    operand; values of every length class of the encoding (and bytes that are not UTF-8) arrive byte for byte, and
    several hash fields are one operation."""

    async def scenario(client: aioredis.Redis, k: Key) -> None:
        values = {f"f{n}": bytes(range(256)) * (n // 256) + bytes(range(n % 256)) for n in (0, 31, 32, 255, 256)}
        values["big"] = b"\xff\x00" * 40_000  # over 64 kB
        writes = Writes()
        writes.set(k("s"), values["big"])
        writes.hset_many(k("h"), values)
        writes.hset_many(k("none"), {})
        script, keys, *rest = writes.script_args()
        assert (keys, len(rest)) == (2, 3)  # two keys and one argument
        await client.eval(script, keys, *rest)
        assert await client.get(k("s")) == values["big"]
        assert await client.hgetall(k("h")) == {f.encode(): v for f, v in values.items()}
        assert await client.exists(k("none")) == 0

    _run(redis_url, scenario)
