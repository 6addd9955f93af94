"""Storage backends behind one `Store` protocol: embedded SQLite by default, Redis for several nodes."""

from __future__ import annotations

from pathlib import Path

from devicehub.store.base import Store

__all__ = ["Store", "open_store", "unavailable", "unreachable"]


def open_store(
    data_dir: Path, redis_url: str = "", *, redis_timeout: float = 5.0, reported_flush_s: float | None = None
) -> Store:
    """The Redis store when a URL is given (several nodes share it), else SQLite under `data_dir`. Reported values
    wait at most `reported_flush_s` before they are written (the node passes `--flush-interval-ms`)."""
    from devicehub.store.write_behind import DEFAULT_INTERVAL_S

    flush_s = DEFAULT_INTERVAL_S if reported_flush_s is None else reported_flush_s
    if redis_url:
        from devicehub.store.redis import RedisStore  # imported only in Redis mode

        return RedisStore(redis_url, timeout=redis_timeout, reported_flush_s=flush_s)
    from devicehub.store.sqlite import SqliteStore

    return SqliteStore(data_dir, reported_flush_s=flush_s)


def unreachable(error: BaseException) -> bool:
    """The store's server cannot be reached or does not answer in time (Redis stopped, restarting, frozen)."""
    from redis import exceptions

    return isinstance(error, exceptions.ConnectionError | exceptions.TimeoutError)


def unavailable(error: BaseException) -> bool:
    """The store cannot serve this now: it cannot write (`Unavailable`: full disk, I/O error) or its server does
    not answer. Background work that meets it retries later and says so once; it is not a fault of the caller."""
    from devicehub.errors import Unavailable

    return isinstance(error, Unavailable) or unreachable(error)
