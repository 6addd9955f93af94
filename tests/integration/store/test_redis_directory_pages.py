"""Issue 30 #5: `GET /v3/devices?limit=1000` asks the store for 1 001 devices (the page and its has-more row); on
Redis that is one ZRANGEBYLEX and one MGET (before: a page of 1 000, then a second page of 1 000 records read for
the one more row). Counted in the server's own command statistics, on a real redis-server."""

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
