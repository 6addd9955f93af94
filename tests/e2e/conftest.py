"""End-to-end fixtures: a real `devicehub serve` process on free ports with a fresh data directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.redis_server import flush_cluster, redis_cluster, redis_server
from support.service import ServiceProcess


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    process = ServiceProcess(data_dir=tmp_path / "data").start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A Redis Cluster of three primaries for the session (issue 31 #2); `redis_url` empties it for each test."""
    with redis_cluster() as url:
        yield url


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A Redis of its own for the test; a test parametrized with `redis_url=["redis", "redis-cluster"]` (indirect)
    runs on both a single Redis and the session's emptied Redis Cluster, found through one of its nodes."""
    if getattr(request, "param", "redis") == "redis-cluster":
        url = request.getfixturevalue("redis_cluster_url")
        flush_cluster(url)
        yield url
        return
    with redis_server() as url:
        yield url


BOTH_REDIS = pytest.mark.parametrize("redis_url", ["redis", "redis-cluster"], indirect=True)
