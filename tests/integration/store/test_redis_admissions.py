"""Issue 30 #5: the admissions of Registers arriving together share one pipeline (store/redis/script_calls.py), on a
real redis-server: each keeps its own atomic claim and reply, and a burst no longer takes a pooled connection each."""

from __future__ import annotations

import asyncio
import itertools

import pytest
import redis.asyncio as aioredis

from devicehub.store.redis.script_calls import GROUP_CALLS, SPACING_S
from devicehub.store.redis.store import RedisStore

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


async def _connections_received(url: str) -> int:
    client = aioredis.Redis.from_url(url)
    try:
        return int((await client.info("stats"))["total_connections_received"])
    finally:
        await client.aclose()


def test_a_burst_of_admissions_shares_one_connection_and_each_gets_its_own_claim(redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, prefix=f"admit{next(_prefixes)}:")
        await store.open()
        try:
            await store.enroll("acc-b", "enrolled")
            ids = itertools.count()
            before = await _connections_received(redis_url)
            names = [f"ep-{i % 100}" for i in range(300)]  # each name three times: one id per name whatever the order
            admitted = await asyncio.gather(
                *(store.admit_endpoint(n, "acc-a", lambda: f"id-{next(ids)}") for n in names),
                store.admit_endpoint("enrolled", "acc-a", lambda: "id-enrolled"),
                store.admit_endpoint("nobody", None, lambda: "id-none"),
                store.admit_authenticated("acc-c", "enrolled", lambda: "id-refused"),
                store.admit_authenticated("acc-c", "fresh", lambda: "id-fresh"),
            )
            opened = await _connections_received(redis_url) - before - 1  # less this probe's own
        finally:
            await store.close()
        by_name: dict[str, set[tuple[str, str]]] = {}
        for name, reply in zip(names, admitted, strict=False):
            assert isinstance(reply, tuple)
            by_name.setdefault(name, set()).add(reply)
        assert all(len(replies) == 1 for replies in by_name.values())
        assert len({reply for replies in by_name.values() for reply in replies}) == 100
        assert all(account == "acc-a" for replies in by_name.values() for account, _ in replies)
        assert admitted[300:] == [("acc-b", "id-enrolled"), None, None, "id-fresh"]
        # one pipeline at a time (a connection or two), not a pooled connection per concurrent call (up to 64)
        assert opened <= 2

    asyncio.run(asyncio.wait_for(main(), 20))


def test_admissions_a_millisecond_apart_share_round_trips(redis_url: str) -> None:
    """Issue 30 #5: Registers at 1 000/s came ~1 ms apart, each found the previous batch answered, and each admission
    was a round trip of its own; a batch now leaves at most once per `SPACING_S`, so those of the next few ms join
    it (read events of the server, `INFO stats`: a pipeline is one)."""

    async def main() -> None:
        store = RedisStore(redis_url, prefix=f"admit{next(_prefixes)}:")
        client = aioredis.Redis.from_url(redis_url)
        await store.open()
        try:
            reads = int((await client.info("stats"))["total_reads_processed"])
            loop = asyncio.get_running_loop()
            started = loop.time()
            calls = []
            for n in range(100):  # the pace of a registration ramp, not a wait for anything
                calls.append(asyncio.ensure_future(store.admit_endpoint(f"paced-{n}", "acc", lambda n=n: f"id-{n}")))
                await asyncio.sleep(0.001)
            admitted = await asyncio.gather(*calls)
            elapsed = loop.time() - started
            reads = int((await client.info("stats"))["total_reads_processed"]) - reads - 1  # less this probe's
        finally:
            await store.close()
            await client.aclose()
        assert admitted == [("acc", f"id-{n}") for n in range(100)]
        assert reads <= elapsed / SPACING_S + 2, (reads, elapsed)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_batch_of_admissions_is_one_script_run_per_group_on_one_redis(redis_url: str) -> None:
    """Fifteenth session: a pipeline of one EVALSHA per admission cost the node redis-py's per-command work and Redis
    a script run per Register; on one Redis the admissions that leave together are one script run per `GROUP_CALLS`
    (`INFO commandstats`), each still its own claim and reply."""

    async def main() -> None:
        store = RedisStore(redis_url, prefix=f"admit{next(_prefixes)}:")
        client = aioredis.Redis.from_url(redis_url)
        await store.open()
        try:
            await store.enroll("acc-b", "enrolled")
            await store.admit_endpoint("warm", "acc-a", lambda: "id-warm")  # the script loaded (a NOSCRIPT is a call)
            await client.config_resetstat()
            admitted = await asyncio.gather(
                *(store.admit_endpoint(f"burst-{n}", "acc-a", lambda n=n: f"id-{n}") for n in range(100)),
                store.admit_endpoint("enrolled", "acc-a", lambda: "id-enrolled"),
                store.admit_authenticated("acc-b", "enrolled", lambda: "id-other"),
                store.admit_authenticated("acc-c", "enrolled", lambda: "id-refused"),
            )
            stats = await client.info("commandstats")
        finally:
            await store.close()
            await client.aclose()
        assert admitted == [*(("acc-a", f"id-{n}") for n in range(100)), ("acc-b", "id-enrolled"), "id-enrolled", None]
        scripts = sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval"))
        assert scripts <= 2 * -(-103 // GROUP_CALLS), stats  # one batch, or two if the first left alone

    asyncio.run(asyncio.wait_for(main(), 20))
