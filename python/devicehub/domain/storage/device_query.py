"""Device directory queries: conditions on directory columns that every store backend answers the same way."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from devicehub.domain.model import Device

TEXT_FIELDS = ("id", "endpoint_name", "endpoint_type", "state", "host_gateway")
TIME_FIELDS = ("created_at", "updated_at")
OPERATORS = ("eq", "neq", "in", "nin", "gte", "lte")


class Condition(msgspec.Struct, frozen=True):
    """`field <op> values`: eq/neq/gte/lte take one value, in/nin any number (an empty `in` matches nothing)."""

    field: str  # one of TEXT_FIELDS or TIME_FIELDS
    op: str  # one of OPERATORS; gte/lte only on TIME_FIELDS
    values: tuple[str, ...] | tuple[float, ...]

    def __post_init__(self) -> None:
        if self.field not in TEXT_FIELDS and self.field not in TIME_FIELDS:
            raise ValueError(f"not a directory column: {self.field!r}")
        if self.op not in OPERATORS or (self.op in ("gte", "lte") and self.field not in TIME_FIELDS):
            raise ValueError(f"operator {self.op!r} does not apply to {self.field!r}")
        if self.op not in ("in", "nin") and len(self.values) != 1:
            raise ValueError(f"{self.op} takes exactly one value")


class DeviceQuery(msgspec.Struct, frozen=True):
    """Conditions ANDed together; no conditions selects every device of the account."""

    conditions: tuple[Condition, ...] = ()

    @classmethod
    def of(cls, query: DeviceQuery | None, state: str | None) -> DeviceQuery:
        """The query with the legacy `state=` keyword folded in."""
        conditions = () if query is None else query.conditions
        if state is not None:
            conditions = (*conditions, Condition("state", "eq", (state,)))
        return cls(conditions)

    def matches(self, device: Device) -> bool:
        return all(_holds(c, getattr(device, c.field)) for c in self.conditions)


def _holds(condition: Condition, value: str | float) -> bool:
    values: Sequence[str | float] = condition.values
    op = condition.op
    if op == "eq":
        return value == values[0]
    if op == "neq":
        return value != values[0]
    if op == "in":
        return value in values
    if op == "nin":
        return value not in values
    if op == "gte":
        return value >= values[0]  # type: ignore[operator]  # TIME_FIELDS only (checked in __post_init__)
    return value <= values[0]  # type: ignore[operator]
