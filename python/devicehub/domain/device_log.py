"""Each device's lifecycle history (issue 32 #3, Pelion's device events `/v3/device-events`): registered, updated,
de-registered, expired, bootstrapped.

An event is written by the store write that makes the change it records (the registration batch, the removal of a
registration), never by a write of its own: the history costs no round trip per Register. An Update is kept only
when it changed the registration (a device refreshing its lifetime every minute would otherwise bury the rest).
Kept `--device-events-retention` seconds and at most MAX_PER_DEVICE per device (a flapping device keeps its newest).
"""

from __future__ import annotations

import itertools

import msgspec

REGISTERED = "registered"
UPDATED = "updated"
DEREGISTERED = "deregistered"
EXPIRED = "expired"
BOOTSTRAPPED = "bootstrapped"
# Pelion's event_type names with its descriptions and categories (DeviceEventData)
DESCRIPTIONS = {
    REGISTERED: ("Device registered", "DEVICE_REGISTRATION"),
    UPDATED: ("Device registration updated", "DEVICE_REGISTRATION"),
    DEREGISTERED: ("Device de-registered", "DEVICE_REGISTRATION"),
    EXPIRED: ("Device registration expired", "DEVICE_REGISTRATION"),
    BOOTSTRAPPED: ("Device bootstrapped", "DEVICE_BOOTSTRAP"),
}
STATE_CHANGES = frozenset({REGISTERED, DEREGISTERED, EXPIRED, BOOTSTRAPPED})  # the device's state moves

MAX_PER_DEVICE = 200  # the newest events a device keeps: a device re-registering in a loop cannot grow its history
ID_LENGTH = 48  # 12 hex of milliseconds, the device id (32 hex), 4 hex of a per-process sequence

_sequence = itertools.count()


class DeviceEventRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One lifecycle event. The id begins with its time, so ids sort by time (then device) in every store."""

    id: str
    account_id: str
    device_id: str
    event_type: str
    at: float
    changes: dict[str, str] = {}  # field → new value, for an update

    @property
    def ms(self) -> int:
        return int(self.id[:12], 16)


def event_id(device_id: str, at: float) -> str:
    return f"{int(at * 1000):012x}{device_id}{next(_sequence) % 65_536:04x}"


def new_event(
    account_id: str, device_id: str, event_type: str, at: float, changes: dict[str, str] | None = None
) -> DeviceEventRecord:
    return DeviceEventRecord(
        id=event_id(device_id, at),
        account_id=account_id,
        device_id=device_id,
        event_type=event_type,
        at=at,
        changes=changes or {},
    )


def device_of(event_id_: str) -> str | None:
    """The device id an event id names, or None when it is not an event id."""
    if len(event_id_) != ID_LENGTH or any(c not in "0123456789abcdef" for c in event_id_):
        return None
    return event_id_[12:44]


def time_bound(at: float) -> str:
    """The id prefix of events at `at` (ids compare as text; a prefix sorts before every id it starts)."""
    return f"{max(0, int(at * 1000)):012x}"
