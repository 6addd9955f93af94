"""Timestamps on the wire: RFC 3339 UTC with milliseconds (wire-format.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache


@lru_cache(maxsize=65_536)  # a listing formats the same few timestamps of each device on every call (issue 15)
def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
