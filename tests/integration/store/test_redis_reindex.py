"""Issue 30 #5: the account's index step (`_reindex_now`) reads `devix`'s generation and entries and the records, then
writes in one script that first checks the generation: two round trips on one Redis and three on the 3-primary
cluster, where a WATCH, an HMGET, an MGET and the MULTI were four. Counted in the servers' own statistics. And the
conflict the WATCH caught: two nodes indexing one account at once both end indexed, the loser after a read again."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import msgspec
import pytest
import redis.asyncio as aioredis

from devicehub.store.redis.codec import SEP
from devicehub.store.redis.store import RedisStore
from devicehub.store.redis.writes import Writes
from support.stores import A, device

pytestmark = pytest.mark.redis

_prefixes = itertools.count()
SERVERS = ["redis", "redis-cluster"]


def _url(server: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("redis_cluster_url" if server == "redis-cluster" else "redis_url"))


def _servers(store: RedisStore) -> list[aioredis.Redis]:
    """A plain client per primary (one Redis: itself)."""
    if not store.cluster:
        kwargs = store.redis.connection_pool.connection_kwargs
        return [aioredis.Redis(host=kwargs.get("host", "localhost"), port=kwargs.get("port", 6379))]
    return [aioredis.Redis(host=n.host, port=n.port) for n in store.redis.get_primaries()]  # type: ignore[attr-defined]


async def _stats(servers: Sequence[aioredis.Redis]) -> tuple[int, dict[str, int]]:
    """Requests read so far over the primaries (`total_reads_processed` counts one per request that arrives whole: a
    pipeline sent together is one; and these two INFO calls), and the calls per command."""
    reads, calls = 0, {}
    for server in servers:
        stats = await server.info("commandstats")
        reads += int((await server.info("stats"))["total_reads_processed"])
        for name, row in stats.items():
            calls[name.removeprefix("cmdstat_")] = calls.get(name.removeprefix("cmdstat_"), 0) + int(row["calls"])
    return reads, calls


@pytest.mark.parametrize("server", SERVERS)
def test_an_index_step_is_two_round_trips_on_one_redis_and_three_on_a_cluster(
    server: str, request: pytest.FixtureRequest
) -> None:
    async def main() -> None:
        store = RedisStore(_url(server, request), prefix=f"reindex{next(_prefixes)}:")
        await store.open()
        servers = _servers(store)
        try:
            await store.put_device(device("d1", "ep1"))
            await store._reindex_now(A, ["d1"])  # connections open, the script loaded, before counting
            before = await _stats(servers)
            await store._reindex_now(A, ["d1"])
            after = await _stats(servers)
        finally:
            await store.close()
            for client in servers:
                await client.aclose()
        reads = after[0] - before[0] - 2 * len(servers)  # less the later INFO calls
        # the commands a client sends here (those a script runs are counted too, and left out)
        sent = ("watch", "hmget", "mget", "multi", "exec", "eval", "evalsha")
        calls = {c: after[1].get(c, 0) - before[1].get(c, 0) for c in sent}
        assert calls == {"watch": 0, "hmget": 1, "mget": 1, "multi": 0, "exec": 0, "eval": 0, "evalsha": 1}
        assert reads == (3 if store.cluster else 2)

    asyncio.run(asyncio.wait_for(main(), 30))


async def _indexes_holding(store: RedisStore, device_id: str) -> set[str]:
    """Every id index (sorted set) that lists the device."""
    keys = [k.decode() async for k in store.redis.scan_iter(match=store.prefix + "devices*")]
    return {k for k in keys if await store.redis.zscore(k, device_id) is not None}


@pytest.mark.parametrize("server", SERVERS)
def test_two_nodes_indexing_one_account_at_once_both_end_indexed(server: str, request: pytest.FixtureRequest) -> None:
    """Node A has read `devix` and the records for its device and is held before its index write; node B indexes
    another device of the account meanwhile (the generation moves). A's write is refused, writes nothing, and A reads
    again: both devices end in the indexes their records name, each once."""

    async def main() -> None:
        url, prefix = _url(server, request), f"reindex{next(_prefixes)}:"
        node_a, node_b = RedisStore(url, prefix=prefix), RedisStore(url, prefix=prefix)
        await node_a.open()
        await node_b.open()
        try:
            reached, release, outcomes = asyncio.Event(), asyncio.Event(), []
            write = node_a._write_checked

            async def held_write(writes: Writes) -> bool:
                reached.set()
                await release.wait()
                outcomes.append(await write(writes))
                return outcomes[-1]

            node_a._write_checked = held_write  # type: ignore[method-assign]
            first = msgspec.structs.replace(device("d1", "ep1"), host_gateway="g1")
            second = msgspec.structs.replace(device("d2", "ep2"), host_gateway="g2")
            writing = asyncio.ensure_future(node_a.put_device(first))
            await asyncio.wait({writing, asyncio.ensure_future(reached.wait())}, return_when="FIRST_COMPLETED")
            assert reached.is_set() and not writing.done()
            await node_b.put_device(second)
            release.set()
            await writing
            assert outcomes == [False, True]  # refused once, then written
            for stored in (first, second):
                assert await _indexes_holding(node_b, stored.id) == set(node_b._device_indexes(stored))
            assert await node_b.count_devices(A) == 2

            # and without a hold: many writes of both nodes at once, to the same devices, end as the records stand
            for n in range(10):
                await asyncio.gather(
                    *(
                        node.put_device(msgspec.structs.replace(device(f"d{i}", f"ep{i}"), host_gateway=f"g{n}{j}"))
                        for j, node in enumerate((node_a, node_b))
                        for i in range(1, 4)
                    )
                )
            membership = await node_b.redis.hgetall(node_b.keys.acc("devix", A))
            for i in range(1, 4):
                stored_device = await node_b.get_device(f"d{i}")
                assert stored_device is not None
                expected = set(node_b._device_indexes(stored_device))
                assert set(membership[f"d{i}".encode()].decode().split(SEP)) == expected
                assert await _indexes_holding(node_b, f"d{i}") == expected
        finally:
            await node_a.close()
            await node_b.close()

    asyncio.run(asyncio.wait_for(main(), 60))
