"""Per-account usage counters by the hour (issue 32 #3, Pelion's `GET /v3/metrics`): counted in memory where the
thing happens (a dict increment), written to the store every FLUSH_S as sums (store/usage_writer.py), so a node adds
no store write per event; in Redis mode every node adds its sums to the same counters. Kept KEEP_S.

Counted: full_registrations (Registers), registration_updates (Updates), deleted_registrations (De-registers),
expired_registrations, bootstraps_successful and bootstraps_failed (sessions of the account's bootstrap
configurations), connect_rest_api_success and connect_rest_api_error (REST API calls made with one of the
account's keys, by status: below 400 or not). Pelion's other metrics are not counted (a request for one is 400).
"""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.clock import Clock

HOUR = 3600
KEEP_S = 90 * 86_400  # how far back the counters go
FLUSH_S = 10.0  # counts not yet written are at most this old (another node's, in Redis mode: what a read misses)

FULL_REGISTRATIONS = "full_registrations"
REGISTRATION_UPDATES = "registration_updates"
DELETED_REGISTRATIONS = "deleted_registrations"
EXPIRED_REGISTRATIONS = "expired_registrations"
BOOTSTRAPS_SUCCESSFUL = "bootstraps_successful"
BOOTSTRAPS_FAILED = "bootstraps_failed"
REST_SUCCESS = "connect_rest_api_success"
REST_ERROR = "connect_rest_api_error"
COUNTED = (
    FULL_REGISTRATIONS,
    REGISTRATION_UPDATES,
    DELETED_REGISTRATIONS,
    EXPIRED_REGISTRATIONS,
    BOOTSTRAPS_SUCCESSFUL,
    BOOTSTRAPS_FAILED,
    REST_SUCCESS,
    REST_ERROR,
)

# (account id, hour's start in seconds, metric, count)
UsageRow = tuple[str, int, str, int]


class UsageMeter:
    """The counts of this node not yet written."""

    __slots__ = ("_clock", "_counts")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._counts: dict[tuple[str, int, str], int] = {}

    def count(self, account_id: str, metric: str, n: int = 1) -> None:
        key = (account_id, int(self._clock.now()) // HOUR * HOUR, metric)
        self._counts[key] = self._counts.get(key, 0) + n

    def take(self) -> list[UsageRow]:
        """The counts so far, handed over (and forgotten here)."""
        counts, self._counts = self._counts, {}
        return [(account, hour, metric, n) for (account, hour, metric), n in counts.items()]

    def give_back(self, rows: Sequence[UsageRow]) -> None:
        """Counts a failed write could not store: added to the next."""
        for account, hour, metric, n in rows:
            self._counts[(account, hour, metric)] = self._counts.get((account, hour, metric), 0) + n
