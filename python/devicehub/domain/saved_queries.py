"""Saved device directory filters (issue 32 #3, Pelion's `/v3/device-queries`): a named query string in the
directory's filter language, unique by name within its account, at most MAX_PER_ACCOUNT per account."""

from __future__ import annotations

from enum import Enum

import msgspec

MAX_PER_ACCOUNT = 1000
MAX_NAME = 200  # Pelion's DeviceQuery name
MAX_QUERY = 1000  # Pelion's DeviceQuery query


class SavedQuery(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    account_id: str
    name: str
    query: str  # URL-encoded `field__op=value` pairs joined by `&`, as `GET /v3/devices?filter=` takes them
    created_at: float
    updated_at: float


class Saved(Enum):
    """What a write of a saved query came to."""

    DONE = "done"
    NAME_TAKEN = "name"  # another query of the account has this name (or, creating, this id)
    FULL = "full"  # a new query beyond MAX_PER_ACCOUNT
    MISSING = "missing"  # an update of a query that is not there
