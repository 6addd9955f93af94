"""Timestamps on the wire: RFC 3339 UTC with milliseconds (wire-format.md)."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
