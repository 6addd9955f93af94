"""The REST tests that run on both stores: `store_url` is "" for the embedded SQLite store, else the URL of a real
redis-server started once per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.redis_server import flush_cluster, redis_cluster, redis_server


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store_url(request: pytest.FixtureRequest) -> str:
    """Both stores: "" is the embedded SQLite store, else a real redis-server's URL."""
    return "" if request.param == "sqlite" else str(request.getfixturevalue("redis_url"))


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    with redis_cluster() as url:
        yield url


@pytest.fixture(params=["redis", "redis-cluster"])
def shared_redis_url(request: pytest.FixtureRequest) -> str:
    """A single Redis (this module's), or a Redis Cluster of three primaries emptied for the test (issue 31 #2)."""
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    url = str(request.getfixturevalue("redis_cluster_url"))
    flush_cluster(url)
    return url
