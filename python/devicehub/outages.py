"""Which errors mean the store cannot serve now (not the caller's fault): background work retries on them. Beside the
layers, so the CoAP responder, the channels and the stores ask the same question without importing a store."""

from __future__ import annotations

from devicehub.errors import Unavailable


def unreachable(error: BaseException) -> bool:
    """The store's server cannot be reached or does not answer in time (Redis stopped, restarting, frozen)."""
    from redis import exceptions  # imported on first failure: SQLite mode need not load redis-py

    return isinstance(error, exceptions.ConnectionError | exceptions.TimeoutError)


def unavailable(error: BaseException) -> bool:
    """The store cannot serve this now: it cannot write (`Unavailable`: full disk, I/O error) or its server does
    not answer. Background work that meets it retries later and says so once; it is not a fault of the caller."""
    return isinstance(error, Unavailable) or unreachable(error)
