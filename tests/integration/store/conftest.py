"""Both Store backends behind one fixture: every contract test runs on SQLite and on a real Redis."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicehub.store.redis.store import RedisStore
from devicehub.store.sqlite.store import SqliteStore
from support.redis_server import redis_server
from support.stores import StoreFactory

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A factory of stores on the same data (a second call reopens what the first one wrote)."""
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path)
    url = request.getfixturevalue("redis_url")
    prefix = f"test{next(_prefixes)}:"
    return lambda: RedisStore(url, prefix=prefix)
