"""Store write failures: one typed error for the API, and one log line a minute while they last (issue 14.9).

A full disk fails every write at once, from request handlers, the journal flusher and the write-behind timers;
logging each would write hundreds of lines a second (to the same full disk, often) and say nothing new.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("devicehub.store")

LOG_EVERY_S = 60.0


class WriteHealth:
    """Whether the store's writes fail, said once a minute while they do, and once when they recover."""

    def __init__(self, *, log_every_s: float = LOG_EVERY_S) -> None:
        self._log_every_s = log_every_s
        self.failing_since: float | None = None
        self.failures = 0
        self._logged_at: float | None = None

    @property
    def failing(self) -> bool:
        return self.failing_since is not None

    def failed(self, reason: str) -> None:
        now = time.monotonic()
        self.failures += 1
        if self.failing_since is None:
            self.failing_since = now
        if self._logged_at is None or now - self._logged_at >= self._log_every_s:
            self._logged_at = now
            log.error(
                "the store cannot write (%s): changes answer 503, reads are still served; %d failed writes so far",
                reason,
                self.failures,
            )

    def succeeded(self) -> None:
        if self.failing_since is not None:
            log.warning("the store writes again after %.0f s of failures", time.monotonic() - self.failing_since)
            self.failing_since = None
            self._logged_at = None
