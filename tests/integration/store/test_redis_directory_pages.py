"""Issue 30 #5: `GET /v3/devices?limit=1000` asks the store for 1 001 devices (the page and its has-more row); on
Redis that is one ZRANGEBYLEX and one MGET (before: a page of 1 000, then a second page of 1 000 records read for
the one more row), and the page's last contacts travel with the MGET: two round trips in all (before: three, the
contacts read after the page). Counted in the server's own statistics, on a real redis-server."""

from __future__ import annotations

import asyncio
import itertools

import pytest
import redis.asyncio as aioredis

from devicehub.store.redis.store import RedisStore
from support.stores import A, device

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


async def _calls(client: aioredis.Redis, command: str) -> int:
    stats = await client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def _reads(client: aioredis.Redis) -> int:
    """Requests the server has read so far, counting this INFO (`total_reads_processed`: one per request that arrives
    whole, as a small one does on loopback: a pipeline of commands sent together is one)."""
    return int((await client.info("stats"))["total_reads_processed"])


def test_the_largest_page_and_its_has_more_row_are_one_read(redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, prefix=f"pages{next(_prefixes)}:")
        client = aioredis.Redis.from_url(redis_url)
        await store.open()
        try:
            await store.put_registered_devices([device(f"d{n:05d}", f"ep{n}") for n in range(2500)])
            before = await _calls(client, "mget"), await _calls(client, "zrangebylex")
            listed = await store.list_devices(A, limit=1001)
            after = await _calls(client, "mget"), await _calls(client, "zrangebylex")
            rest = await store.list_devices(A, after=listed[-1].id, limit=2000)  # pages of at most 1 001 walked on
        finally:
            await store.close()
            await client.aclose()
        assert [d.id for d in listed] == [f"d{n:05d}" for n in range(1001)]
        assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
        assert [d.id for d in rest] == [f"d{n:05d}" for n in range(1001, 2500)]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_page_and_its_contacts_are_two_round_trips(redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, prefix=f"pages{next(_prefixes)}:")
        client = aioredis.Redis.from_url(redis_url)
        await store.open()
        try:
            await store.put_registered_devices([device(f"d{n:02d}", f"ep{n}") for n in range(20)])
            await store.put_contacts([(A, f"d{n:02d}", 1000.0 + n) for n in range(0, 20, 2)])
            await store.list_devices_and_contacts(A, limit=1001)  # the store's connection is open before counting
            before = await _reads(client), await _calls(client, "hmget")
            listed, contacts = await store.list_devices_and_contacts(A, limit=1001)
            after = await _reads(client), await _calls(client, "hmget")
        finally:
            await store.close()
            await client.aclose()
        assert len(listed) == 20 and contacts == {f"d{n:02d}": 1000.0 + n for n in range(0, 20, 2)}
        # between the two INFO calls: the index's ZRANGEBYLEX, then the MGET and HMGET in one pipeline (and the
        # later INFO's own read, and the earlier INFO's commandstats read)
        assert after[1] - before[1] == 1
        assert after[0] - before[0] - 2 == 2

    asyncio.run(asyncio.wait_for(main(), 30))
