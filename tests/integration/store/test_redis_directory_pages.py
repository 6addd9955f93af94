"""Issue 30 #5: `GET /v3/devices?limit=1000` asks the store for 1 001 devices (the page and its has-more row); on
Redis that is one ZRANGEBYLEX and one MGET (before: a page of 1 000, then a second page of 1 000 records read for
the one more row), and the page's last contacts travel with the MGET: two round trips in all (before: three, the
contacts read after the page). Counted in the server's own statistics, on a real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import msgspec
import pytest
import redis.asyncio as aioredis

from devicehub.domain.model import Device, ResourceLink
from devicehub.domain.storage.device_query import Condition, DeviceQuery
from devicehub.store.redis.store import RedisStore
from support.stores import A, device

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


@contextlib.asynccontextmanager
async def _store_and_client(redis_url: str) -> AsyncIterator[tuple[RedisStore, aioredis.Redis]]:
    """A store under a prefix of its own, open, and a plain client of the same server to count what it sends."""
    store = RedisStore(redis_url, prefix=f"pages{next(_prefixes)}:")
    client = aioredis.Redis.from_url(redis_url)
    await store.open()
    try:
        yield store, client
    finally:
        await store.close()
        await client.aclose()


async def _calls(client: aioredis.Redis, command: str) -> int:
    stats = await client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


async def _reads(client: aioredis.Redis) -> int:
    """Requests the server has read so far, counting this INFO (`total_reads_processed`: one per request that arrives
    whole, as a small one does on loopback: a pipeline of commands sent together is one)."""
    return int((await client.info("stats"))["total_reads_processed"])


def test_the_largest_page_and_its_has_more_row_are_one_read(redis_url: str) -> None:
    async def main() -> None:
        async with _store_and_client(redis_url) as (store, client):
            await store.put_registered_devices([device(f"d{n:05d}", f"ep{n}") for n in range(2500)])
            before = await _calls(client, "mget"), await _calls(client, "zrangebylex")
            listed = await store.list_devices(A, limit=1001)
            after = await _calls(client, "mget"), await _calls(client, "zrangebylex")
            rest = await store.list_devices(A, after=listed[-1].id, limit=2000)  # pages of at most 1 001 walked on
        assert [d.id for d in listed] == [f"d{n:05d}" for n in range(1001)]
        assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
        assert [d.id for d in rest] == [f"d{n:05d}" for n in range(1001, 2500)]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_page_and_its_contacts_are_two_round_trips(redis_url: str) -> None:
    async def main() -> None:
        async with _store_and_client(redis_url) as (store, client):
            await store.put_registered_devices([device(f"d{n:02d}", f"ep{n}") for n in range(20)])
            await store.put_contacts([(A, f"d{n:02d}", 1000.0 + n) for n in range(0, 20, 2)])
            await store.list_devices_and_contacts(A, limit=1001)  # the store's connection is open before counting
            before = await _reads(client), await _calls(client, "hmget")
            listed, contacts = await store.list_devices_and_contacts(A, limit=1001)
            after = await _reads(client), await _calls(client, "hmget")
        assert len(listed) == 20 and contacts == {f"d{n:02d}": 1000.0 + n for n in range(0, 20, 2)}
        # between the two INFO calls: the index's ZRANGEBYLEX, then the MGET and HMGET in one pipeline (and the
        # later INFO's own read, and the earlier INFO's commandstats read)
        assert after[1] - before[1] == 1
        assert after[0] - before[0] - 2 == 2

    asyncio.run(asyncio.wait_for(main(), 30))


def _resourceful(n: int) -> Device:
    """A device with a Pelion-sized object list (its record ~3x its directory summary)."""
    links = tuple(ResourceLink(path=f"/3/0/{r}", rt="urn:oma:lwm2m:oma:3", obs=r % 2 == 0) for r in range(12))
    return msgspec.structs.replace(device(f"d{n:04d}", f"ep{n}"), resources=links)


def test_a_page_reads_the_devices_summaries_not_their_records(redis_url: str) -> None:
    """Issue 30 #5: a page shows no resources, so it reads each device's directory summary (its record without
    them, written beside it): redis-server sends less for the whole page than the records alone would take."""

    async def main() -> None:
        async with _store_and_client(redis_url) as (store, client):
            devices = [_resourceful(n) for n in range(300)]
            await store.put_registered_devices(devices)
            async with client.pipeline(transaction=False) as pipe:
                for d in devices:
                    pipe.strlen(store.keys.dev("device", d.id))
                records = sum(await pipe.execute())
            await store.list_devices_and_contacts(A, limit=1001)  # the store's connection is open before counting
            before = int((await client.info("stats"))["total_net_output_bytes"])
            listed, _ = await store.list_devices_and_contacts(A, limit=1001)
            sent = int((await client.info("stats"))["total_net_output_bytes"]) - before
        assert [d.id for d in listed] == [d.id for d in devices]
        assert sent < records / 2, (sent, records)
        assert all(d.resources == () for d in listed)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_records_of_a_previous_release_without_a_summary_are_listed_whole(redis_url: str) -> None:
    """The upgrade path: a record written before summaries were has none; a page lists it from the record, in its
    place, with its contact (one more read for that page), and a device deleted meanwhile stays out. A write of the
    device gives it its summary."""

    async def main() -> None:
        async with _store_and_client(redis_url) as (store, client):
            devices = [_resourceful(n) for n in range(40)]
            await store.put_registered_devices(devices)
            await store.put_contacts([(A, d.id, 5000.0 + n) for n, d in enumerate(devices)])
            old = [d.id for d in devices[::3]]
            await client.delete(*(store.keys.dev("device_dir", i) for i in old))  # as the previous release wrote
            await client.delete(store.keys.dev("device", "d0003"))  # deleted since the index was read
            listed, contacts = await store.list_devices_and_contacts(A, limit=1001)
            filtered = await store.list_devices_and_contacts(A, query=DeviceQuery(), limit=5, descending=True)
            counted = await store.count_devices(
                A, query=DeviceQuery((Condition("state", "eq", ("registered",)), Condition("id", "nin", ("x",))))
            )
            await store.put_device(devices[0])
            rewritten = await client.exists(store.keys.dev("device_dir", devices[0].id))
        kept = [d for d in devices if d.id != "d0003"]
        assert [d.id for d in listed] == [d.id for d in kept]
        assert [d.resources == () for d in listed] == [d.id not in old for d in kept]  # the old ones read whole
        assert contacts == {d.id: 5000.0 + int(d.id[1:]) for d in kept}
        assert [d.id for d in filtered[0]] == [d.id for d in kept[::-1][:5]]
        assert counted == 39 and rewritten == 1

    asyncio.run(asyncio.wait_for(main(), 30))
