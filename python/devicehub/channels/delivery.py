"""Delivery control a channel may opt into (issue 34 #4): the `"delivery"` object of a channel registration.

Each is off by default, so a channel behaves as the spec says (§6 rule 7's retry table, every event kind). `max_rate`
and `events` apply to callback and WebSocket channels (`PUT /v2/notification/websocket`); the others answer a
callback receiver's HTTP status and are refused for a WebSocket (the deprecated pull channel has no registration
body, so none applies to it):
- `retry_after`: a callback answered 429 or 503 with `Retry-After` (RFC 9110 §10.2.3) waits that long, if longer
  than the table's wait (at most MAX_RETRY_AFTER_S);
- `remove_on_gone`: a callback answered 410 Gone removes the channel (as Svix does): the receiver says it is gone
  for good, so retrying for 24 hours only loads it;
- `max_rate`: events a second the channel delivers at most (a token bucket of one second's worth);
- `circuit_breaker`: after BREAKER_FAILURES failures in a row the deliverer stops for BREAKER_OPEN_S, then one
  batch probes the receiver: success closes the breaker, a failure opens it again;
- `events`: the event kinds the channel takes (others are not queued for it).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

import msgspec

from devicehub._core import (
    KIND_ASYNC_RESPONSE,
    KIND_DE_REGISTRATION,
    KIND_NOTIFICATION,
    KIND_REG_UPDATE,
    KIND_REGISTRATION,
    KIND_REGISTRATIONS_EXPIRED,
)
from devicehub.errors import FieldError, ValidationFailed

MAX_RETRY_AFTER_S = 3600.0
BREAKER_FAILURES = 5
BREAKER_OPEN_S = 60.0
MAX_RATE = 100_000.0
EVENT_KINDS = {  # wire-format.md NotificationMessage keys
    "notifications": KIND_NOTIFICATION,
    "registrations": KIND_REGISTRATION,
    "reg-updates": KIND_REG_UPDATE,
    "de-registrations": KIND_DE_REGISTRATION,
    "registrations-expired": KIND_REGISTRATIONS_EXPIRED,
    "async-responses": KIND_ASYNC_RESPONSE,
}
KIND_NAMES = {kind: name for name, kind in EVENT_KINDS.items()}
_KEYS = frozenset({"retry_after", "remove_on_gone", "max_rate", "circuit_breaker", "events"})


class DeliveryOptions(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    retry_after: bool = False
    remove_on_gone: bool = False
    max_rate: float = 0.0  # events a second; 0: no limit
    circuit_breaker: bool = False
    events: list[str] | None = None  # None: every kind

    @property
    def kinds(self) -> frozenset[int] | None:
        return None if self.events is None else frozenset(EVENT_KINDS[e] for e in self.events)

    @classmethod
    def from_wire(cls, raw: object, field: str = "delivery") -> DeliveryOptions:
        """Validate a `"delivery"` object; raises ValidationFailed (400) naming the field."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise _invalid(field, "must be an object")
        unknown = sorted(set(raw) - _KEYS)
        if unknown:
            raise _invalid(f"{field}.{unknown[0]}", "unknown field")
        flags = {}
        for name in ("retry_after", "remove_on_gone", "circuit_breaker"):
            value = raw.get(name)
            if value is not None and not isinstance(value, bool):
                raise _invalid(f"{field}.{name}", "must be a boolean")
            flags[name] = bool(value)
        rate = raw.get("max_rate") or 0
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= MAX_RATE:
            raise _invalid(f"{field}.max_rate", f"must be a number of events a second, 0…{MAX_RATE:g}")
        events = raw.get("events")
        if events is not None:
            if (
                not isinstance(events, list)
                or not events
                or any(not isinstance(e, str) or e not in EVENT_KINDS for e in events)
            ):
                raise _invalid(f"{field}.events", f"must be a non-empty list of {', '.join(EVENT_KINDS)}")
            events = sorted(set(events))
        if rate:  # omitted when 0 (omit_defaults compares a float default by identity)
            return cls(max_rate=float(rate), events=events, **flags)
        return cls(events=events, **flags)


CALLBACK_ONLY = ("retry_after", "remove_on_gone", "circuit_breaker")


def for_socket(raw: object, field: str = "delivery") -> DeliveryOptions:
    """A WebSocket channel's `"delivery"` object: the event filter and the rate apply to every channel kind; the
    rest answers a callback receiver's HTTP status, which a socket has none of (400 when asked)."""
    options = DeliveryOptions.from_wire(raw, field)
    for name in CALLBACK_ONLY:
        if getattr(options, name):
            raise _invalid(f"{field}.{name}", "applies to callback channels only")
    return options


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """RFC 9110 §10.2.3: delay-seconds or an HTTP-date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class RateLimit:
    """A token bucket of `rate` events a second holding one second's worth: how long a batch must wait."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self._tokens = rate
        self._at = now

    def wait(self, count: int, now: float) -> float:
        """Take `count` events' tokens (going into debt); the seconds until the debt is paid."""
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= count
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


def _invalid(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{name}: {message}", fields=(FieldError(name, message),))
