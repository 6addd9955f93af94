"""Which errors mean the store cannot serve now (not the caller's fault): background work retries on them. Beside the
layers, so the CoAP responder, the channels and the stores ask the same question without importing a store."""

from __future__ import annotations

import logging
from collections.abc import Callable

from devicehub.errors import Unavailable


def unreachable(error: BaseException) -> bool:
    """The store's server cannot be reached or does not answer in time (Redis stopped, restarting, frozen)."""
    from redis import exceptions  # imported on first failure: SQLite mode need not load redis-py

    return isinstance(error, exceptions.ConnectionError | exceptions.TimeoutError)


def unavailable(error: BaseException) -> bool:
    """The store cannot serve this now: it cannot write (`Unavailable`: full disk, I/O error) or its server does
    not answer. Background work that meets it retries later and says so once; it is not a fault of the caller."""
    return isinstance(error, Unavailable) or unreachable(error)


REPEAT_S = 60.0  # a failure that lasts is said again this often, with a count, not on every tick


class OutageLog:
    """The log of one background task that runs on a tick and fails on every tick while the store is away (issue
    32 #5: with Redis down, the expiry check wrote an ERROR with a traceback every second). Said when it starts —
    a warning with the reason when the store is unavailable, with the traceback otherwise — then every REPEAT_S
    with the count of failures, and once when the task works again."""

    def __init__(self, logger: logging.Logger, task: str, now: Callable[[], float]) -> None:
        self._log = logger
        self._task = task
        self._now = now
        self._failures = 0
        self._said_at = 0.0

    def failed(self, error: BaseException) -> None:
        self._failures += 1
        now = self._now()
        if self._failures > 1 and now - self._said_at < REPEAT_S:
            return
        self._said_at = now
        if self._failures > 1:
            self._log.warning("%s still failing (%d times so far): %s", self._task, self._failures, error)
        elif unavailable(error):
            self._log.warning("%s failed: the store is unavailable (%s); retrying", self._task, error)
        else:
            self._log.error("%s failed; retrying", self._task, exc_info=error)

    def worked(self) -> None:
        if self._failures:
            self._log.info("%s works again after %d failure(s)", self._task, self._failures)
            self._failures = 0
