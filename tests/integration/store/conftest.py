"""Both Store backends behind one fixture: every contract test runs on SQLite, on a real Redis and on a Redis Cluster of
three primaries (issue 31 #2: the same store, the cluster detected from the URL)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicehub.store.redis.store import RedisStore
from devicehub.store.sqlite.store import SqliteStore
from support.redis_server import redis_cluster, redis_server
from support.stores import StoreFactory

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def single_redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture
def redis_url(single_redis_url: str) -> str:
    return single_redis_url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    with redis_cluster() as url:
        yield url


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis),
    ]
)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A factory of stores on the same data (a second call reopens what the first one wrote)."""
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path)
    url = request.getfixturevalue("redis_cluster_url" if request.param == "redis-cluster" else "redis_url")
    prefix = f"test{next(_prefixes)}:"
    return lambda: RedisStore(url, prefix=prefix)
