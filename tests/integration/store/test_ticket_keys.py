"""The DTLS ticket key ring in the store (issue 31 #5): made once, kept until due, rotated by one step (next becomes
current, current previous), the same ring for every node however many rotate at once, sealed (another sealing key
reads nothing). On SQLite (a file in the data dir) and on a real Redis and Redis Cluster."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from devicehub.domain.credentials import SecretBox
from devicehub.domain.ticket_keys import KEY_BYTES, TicketKeyStore
from devicehub.store.redis.connection import is_cluster
from devicehub.store.redis.ticket_keys import RedisTicketKeys
from devicehub.store.sqlite.ticket_keys import FileTicketKeys

DAY = 86_400.0
SEALING = SecretBox(bytes(32))
_prefixes = itertools.count()


@pytest.fixture(
    params=["sqlite", pytest.param("redis", marks=pytest.mark.redis), pytest.param("cluster", marks=pytest.mark.redis)]
)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run_with_stores(kind: str, request: pytest.FixtureRequest, tmp_path: Path, scenario: Any) -> None:
    """Runs `scenario(make)`; `make(box)` gives a store on the same ring (another node, or this one restarted)."""
    if kind == "sqlite":
        asyncio.run(scenario(lambda box=SEALING: FileTicketKeys(tmp_path / "dtls-ticket-keys", box)))
        return
    url = request.getfixturevalue("redis_cluster_url" if kind == "cluster" else "single_redis_url")
    prefix = f"tickets{next(_prefixes)}:"

    async def main() -> None:
        client = RedisCluster.from_url(url) if await is_cluster(url) else aioredis.Redis.from_url(url)
        try:
            await scenario(lambda box=SEALING: RedisTicketKeys(client, prefix, box))
        finally:
            await client.aclose()

    asyncio.run(main())


def test_the_ring_is_made_once_kept_until_due_then_rotated_by_one_step(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async def scenario(make: Any) -> None:
        first = await make().rotate(1_000.0, DAY)
        assert first.previous is None and len(first.current) == len(first.next) == KEY_BYTES
        assert first.installed() == [first.current, first.next]
        assert await make().rotate(1_000.0 + DAY - 1, DAY) == first  # another node, or this one restarted
        rotated = await make().rotate(1_000.0 + DAY, DAY)
        assert (rotated.current, rotated.previous) == (first.next, first.current)
        assert rotated.next not in (first.current, first.next)

    run_with_stores(kind, request, tmp_path, scenario)


# several nodes share a ring only through Redis: an embedded store's data directory has one node
@pytest.mark.parametrize(
    "shared", [pytest.param("redis", marks=pytest.mark.redis), pytest.param("cluster", marks=pytest.mark.redis)]
)
def test_nodes_rotating_at_once_end_with_one_ring(shared: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    kind = shared

    async def scenario(make: Any) -> None:
        await make().rotate(0.0, DAY)
        stores: list[TicketKeyStore] = [make() for _ in range(8)]
        rings = await asyncio.gather(*(store.rotate(DAY, DAY) for store in stores))
        assert len({ring.next for ring in rings}) == 1  # one node rotated; the others took its ring
        assert await make().rotate(DAY, DAY) == rings[0]

    run_with_stores(kind, request, tmp_path, scenario)


def test_a_node_with_another_sealing_key_reads_nothing_and_does_not_replace_the_ring(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    async def scenario(make: Any) -> None:
        shared = await make().rotate(0.0, DAY)
        stranger = await make(SecretBox(bytes([1]) * 32)).rotate(1.0, DAY)
        assert shared.current not in stranger.installed()
        if kind != "sqlite":  # in Redis the others' ring stays (in a data dir the file is this node's alone)
            assert await make().rotate(2.0, DAY) == shared

    run_with_stores(kind, request, tmp_path, scenario)
