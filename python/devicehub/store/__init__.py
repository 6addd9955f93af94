"""Storage backends behind one `Store` protocol: embedded SQLite by default, Redis for several nodes."""

from __future__ import annotations

from pathlib import Path

from devicehub.store.base import Store

__all__ = ["Store", "open_store", "unreachable"]


def open_store(data_dir: Path, redis_url: str = "", *, redis_timeout: float = 5.0) -> Store:
    """The Redis store when a URL is given (several nodes share it), else SQLite under `data_dir`."""
    if redis_url:
        from devicehub.store.redis import RedisStore  # imported only in Redis mode

        return RedisStore(redis_url, timeout=redis_timeout)
    from devicehub.store.sqlite import SqliteStore

    return SqliteStore(data_dir)


def unreachable(error: BaseException) -> bool:
    """The store's server cannot be reached or does not answer in time (Redis stopped, restarting, frozen)."""
    from redis import exceptions

    return isinstance(error, exceptions.ConnectionError | exceptions.TimeoutError)
