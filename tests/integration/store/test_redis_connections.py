"""The Redis store's connections pack commands with hiredis (issue 30 #5, store/redis/packing.py) on one Redis, on
a cluster's primaries (redis-py's cluster client takes no connection class: the store sets its nodes'), and on the
per-primary clients of the cluster's transactions."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from redis.asyncio.cluster import RedisCluster

from devicehub.store.redis.packing import HiredisConnection
from devicehub.store.redis.store import RedisStore
from support.stores import A, device

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


@pytest.mark.parametrize("where", ["redis", "redis-cluster"])
def test_every_connection_of_the_store_packs_with_hiredis(where: str, request: pytest.FixtureRequest) -> None:
    url = str(request.getfixturevalue("redis_cluster_url" if where == "redis-cluster" else "redis_url"))

    async def main() -> None:
        store = RedisStore(url, prefix=f"packing{next(_prefixes)}:")
        await store.open()
        try:
            await store.put_registered_devices([device(f"d{n}", f"ep{n}") for n in range(40)])  # every primary
            assert len(await store.list_devices(A, limit=100)) == 40
            client = store.redis
            if isinstance(client, RedisCluster):
                nodes = client.get_nodes()
                assert len(nodes) == 3 and {node.connection_class for node in nodes} == {HiredisConnection}
            else:
                assert client.connection_pool.connection_class is HiredisConnection
            assert store.shard(store.keys.acc("devix", A)).connection_pool.connection_class is HiredisConnection
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 30))
