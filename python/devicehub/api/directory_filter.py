"""Device directory filters of `GET /v3/devices` (Pelion's device directory API): parsed into a store query.

Pelion takes them two ways, and so does this: URL-encoded inside `filter=` (`filter=endpoint_type%3Dsensor`,
the legacy SDK, where a bare key means `__eq`) and as plain query parameters (`endpoint_type__eq=sensor`,
the foundation SDK). `__in`/`__nin` values are comma-separated; date-times are UTC RFC 3339, with or without
milliseconds, or shortened (`20161130T162512Z`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qsl

from devicehub.domain.storage.device_query import Condition, DeviceQuery
from devicehub.errors import FieldError, ValidationFailed

TEXT_OPS = ("eq", "neq", "in", "nin")
TIME_OPS = ("eq", "neq", "in", "nin", "gte", "lte")
MAX_VALUE = 1024
MAX_VALUES = 100
RESERVED = frozenset({"limit", "after", "order", "include", "filter", "sort"})
# Pelion's device states; devicehub only reaches registered/deregistered, the others select nothing
STATES = ("unenrolled", "cloud_enrolling", "bootstrapped", "registered", "deregistered")


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # as the API names it
    column: str | None  # store column (domain/storage/device_query.py), or None for a field every device shares
    ops: tuple[str, ...]
    choices: tuple[str, ...] = ()  # the values Pelion defines, when it defines a set
    constant: str = ""  # the value of a field without a column (DeviceModel's default)
    time: bool = False


FIELDS = {
    f.name: f
    for f in (
        Field("id", "id", TEXT_OPS),
        Field("endpoint_name", "endpoint_name", TEXT_OPS),
        Field("name", "endpoint_name", TEXT_OPS),  # a device's name is its endpoint name (DeviceModel)
        Field("endpoint_type", "endpoint_type", TEXT_OPS),
        Field("state", "state", TEXT_OPS, STATES),
        Field("host_gateway", "host_gateway", TEXT_OPS),
        Field("deployed_state", None, TEXT_OPS, ("development", "production"), constant="development"),
        Field("mechanism", None, TEXT_OPS, ("connector", "direct"), constant="direct"),
        Field("created_at", "created_at", TIME_OPS, time=True),
        Field("updated_at", "updated_at", TIME_OPS, time=True),
    )
}

_SHORT_TIME = re.compile(r"^(\d{8})T(\d{6})(\.\d+)?Z$")


def filter_parameter_names() -> list[tuple[str, str, Field]]:
    """Every plain query parameter a filter can take: (parameter, operator, field), for the OpenAPI document."""
    return [(f"{f.name}__{op}", op, f) for f in FIELDS.values() for op in f.ops]


def _bad(key: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"filter {key}: {message}", fields=(FieldError(key, message),))


def parse_time(key: str, text: str) -> float:
    """An RFC 3339 date-time (or Pelion's short form) as seconds; 400 naming `key` otherwise."""
    short = _SHORT_TIME.match(text)
    if short:
        date, clock, fraction = short.groups()
        text = f"{date[:4]}-{date[4:6]}-{date[6:]}T{clock[:2]}:{clock[2:4]}:{clock[4:]}{fraction or ''}Z"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _bad(key, "not an RFC 3339 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # Pelion's date-times are UTC
    return moment.timestamp()


def _condition(key: str, raw: str) -> Condition | bool:
    """The condition `key=raw` sets, or whether it holds for every device (a field without a column)."""
    name, _, op = key.partition("__")
    field = FIELDS.get(name)
    if field is None:
        raise _bad(key, f"unknown filter field; filterable: {', '.join(FIELDS)}")
    op = op or "eq"
    if op not in field.ops:
        raise _bad(key, f"{name} takes {', '.join('__' + o for o in field.ops)}")
    parts = raw.split(",") if op in ("in", "nin") else [raw]
    if len(parts) > MAX_VALUES or any(len(p) > MAX_VALUE for p in parts):
        raise _bad(key, f"at most {MAX_VALUES} values of {MAX_VALUE} characters")
    if field.choices:
        wrong = [p for p in parts if p not in field.choices]
        if wrong:
            raise _bad(key, f"{wrong[0]!r} is not one of {', '.join(field.choices)}")
    if field.column is None:
        inside = field.constant in parts
        return inside if op in ("eq", "in") else not inside
    if field.time:
        return Condition(field.column, op, tuple(parse_time(key, p) for p in parts))
    return Condition(field.column, op, tuple(parts))


def parse_filters(query: Iterable[tuple[str, str]]) -> DeviceQuery | None:
    """The store query for the request's query parameters; None when no device can match."""
    pairs: list[tuple[str, str]] = []
    for key, value in query:
        if key == "filter":
            pairs.extend(parse_qsl(value, keep_blank_values=True))
        elif key not in RESERVED:
            pairs.append((key, value))
    conditions: list[Condition] = []
    possible = True
    for key, value in pairs:
        outcome = _condition(key, value)  # every pair is checked, so a bad one is a 400 even beside an empty one
        if isinstance(outcome, Condition):
            conditions.append(outcome)
        else:
            possible = possible and outcome
    return DeviceQuery(tuple(conditions)) if possible else None
