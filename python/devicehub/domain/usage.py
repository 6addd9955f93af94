"""Per-account usage counters by the hour (issue 32 #3, Pelion's `GET /v3/metrics`): counted in memory where the
thing happens (a dict increment), written to the store every FLUSH_S as sums (store/usage_writer.py), so a node adds
no store write per event; in Redis mode every node adds its sums to the same counters. Kept KEEP_S.

Counted: full_registrations (Registers), registration_updates (Updates), deleted_registrations (De-registers),
expired_registrations, bootstraps_successful and bootstraps_failed (sessions of the account's bootstrap
configurations), connect_rest_api_success and connect_rest_api_error (REST API calls made with one of the
account's keys, by status: below 400 or not), transactions (Pelion: device-bound events — each notification received
and each request sent to a device, counted per batch of notifications), device_observations (notifications received),
device_proxy_request_success and _error (requests sent to a device: answered 2.xx, or not / no answer),
device_subscription_request_success and _error (observe requests, the same way), handshakes_successful (DTLS and
TLS handshakes authenticated by the LwM2M server's listeners with one of the account's credentials),
bootstraps_pending (bootstrap sessions that started in the hour and have not ended yet: +1 at the start, -1 at its
end whatever the outcome, both in the hour it started).

A gauge, not a count: registered_devices (the account's devices in state `registered`, as the directory counts
them), sampled every SAMPLE_S by one node (a lease) and at each read of the caller's own account; each hour keeps its
last sample, an interval shows the last sample of its hours.
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
TRANSACTIONS = "transactions"
OBSERVATIONS = "device_observations"
PROXY_SUCCESS = "device_proxy_request_success"
PROXY_ERROR = "device_proxy_request_error"
SUBSCRIPTION_SUCCESS = "device_subscription_request_success"
SUBSCRIPTION_ERROR = "device_subscription_request_error"
HANDSHAKES = "handshakes_successful"
BOOTSTRAPS_PENDING = "bootstraps_pending"
REGISTERED_DEVICES = "registered_devices"
SAMPLE_S = 300.0  # how often the registered devices are sampled
GAUGES = (REGISTERED_DEVICES,)
COUNTED = (
    FULL_REGISTRATIONS,
    REGISTRATION_UPDATES,
    DELETED_REGISTRATIONS,
    EXPIRED_REGISTRATIONS,
    BOOTSTRAPS_SUCCESSFUL,
    BOOTSTRAPS_FAILED,
    REST_SUCCESS,
    REST_ERROR,
    TRANSACTIONS,
    OBSERVATIONS,
    PROXY_SUCCESS,
    PROXY_ERROR,
    SUBSCRIPTION_SUCCESS,
    SUBSCRIPTION_ERROR,
    HANDSHAKES,
    BOOTSTRAPS_PENDING,
    REGISTERED_DEVICES,
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

    def count_many(self, metric: str, per_account: dict[str, int]) -> None:
        """A batch's counts at once (one clock read): the notification path counts this way."""
        hour = int(self._clock.now()) // HOUR * HOUR
        counts = self._counts
        for account_id, n in per_account.items():
            key = (account_id, hour, metric)
            counts[key] = counts.get(key, 0) + n

    def count_at(self, account_id: str, at: float, metric: str, n: int) -> None:
        """Count in the hour of `at` (bootstraps_pending: a session's end is taken off the hour it started)."""
        key = (account_id, int(at) // HOUR * HOUR, metric)
        self._counts[key] = self._counts.get(key, 0) + n

    def hour_now(self) -> int:
        return int(self._clock.now()) // HOUR * HOUR

    def take(self) -> list[UsageRow]:
        """The counts so far, handed over (and forgotten here)."""
        counts, self._counts = self._counts, {}
        return [(account, hour, metric, n) for (account, hour, metric), n in counts.items()]

    def give_back(self, rows: Sequence[UsageRow]) -> None:
        """Counts a failed write could not store: added to the next."""
        for account, hour, metric, n in rows:
            self._counts[(account, hour, metric)] = self._counts.get((account, hour, metric), 0) + n
