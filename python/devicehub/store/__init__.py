"""Storage backends of the domain's `Store`: embedded SQLite by default, Redis for several nodes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeGuard

from devicehub.domain.storage.store import Store

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = ["SharedStore", "is_shared", "open_store"]


class SharedStore(Store, Protocol):
    """A store several nodes share: its server also carries their coordination (key revocations, channel
    ownership, held devices), under the store's key prefix."""

    @property
    def redis(self) -> Redis | RedisCluster: ...

    def shard(self, key: str) -> Redis:
        """The server holding `key`'s slot (the one Redis, or that slot's primary in a cluster): for a transaction
        or a sharded pub/sub channel."""
        ...

    @property
    def prefix(self) -> str: ...


def is_shared(store: Store) -> TypeGuard[SharedStore]:
    """The store's capability flag, so the node turns cluster coordination on without knowing the backend."""
    return store.shared


def open_store(
    data_dir: Path, redis_url: str = "", *, redis_timeout: float = 5.0, reported_flush_s: float | None = None
) -> Store:
    """The Redis store when a URL is given (several nodes share it), else SQLite under `data_dir`. Reported values
    wait at most `reported_flush_s` before they are written (the node passes `--flush-interval-ms`)."""
    from devicehub.store.write_behind import DEFAULT_INTERVAL_S

    flush_s = DEFAULT_INTERVAL_S if reported_flush_s is None else reported_flush_s
    if redis_url:
        from devicehub.store.redis.store import RedisStore  # imported only in Redis mode

        return RedisStore(redis_url, timeout=redis_timeout, reported_flush_s=flush_s)
    from devicehub.store.sqlite.store import SqliteStore

    return SqliteStore(data_dir, reported_flush_s=flush_s)
