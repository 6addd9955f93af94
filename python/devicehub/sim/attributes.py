"""Notification attributes (LwM2M 1.0 §5.1.2) as a real client applies them: pmin, pmax, st, gt, lt.

Attributes written on an object or instance are inherited by what is below it; the most specific level wins.
An attribute written without a value is removed (LwM2M 1.1).
"""

from __future__ import annotations

from dataclasses import dataclass

NAMES = ("pmin", "pmax", "st", "gt", "lt")


class BadAttribute(ValueError):
    """An unknown attribute or a value that is not a number."""


@dataclass(frozen=True, slots=True)
class Attributes:
    pmin: float | None = None
    pmax: float | None = None
    st: float | None = None
    gt: float | None = None
    lt: float | None = None

    def should_notify(self, previous: float | None, current: float | None, since_last: float) -> bool:
        """Does a changed value warrant a notification now (pmin is checked by the caller)?"""
        if previous is None or current is None:
            return True
        numeric_rules = [r for r in (self.st, self.gt, self.lt) if r is not None]
        if not numeric_rules:
            return True
        if self.st is not None and abs(current - previous) >= self.st:
            return True
        if self.gt is not None and (previous <= self.gt < current or current <= self.gt < previous):
            return True
        return self.lt is not None and (previous < self.lt <= current or current < self.lt <= previous)


def parse_query(query: list[str], current: dict[str, float]) -> dict[str, float]:
    """Apply a Write-Attributes query to the attributes stored at one path."""
    updated = dict(current)
    for item in query:
        name, eq, value = item.partition("=")
        if name not in NAMES:
            raise BadAttribute(f"unknown attribute {name!r}")
        if not eq or value == "":
            updated.pop(name, None)
            continue
        try:
            updated[name] = float(value)
        except ValueError as error:
            raise BadAttribute(f"{name}={value!r} is not a number") from error
    if "gt" in updated and "lt" in updated and not updated["lt"] + 2 * updated.get("st", 0) < updated["gt"]:
        raise BadAttribute("lt + 2·st must be below gt")
    return updated


def effective(stored: dict[str, dict[str, float]], path: str) -> Attributes:
    """Attributes that apply at `path`: object, then instance, then resource level."""
    parts = [p for p in path.split("/") if p]
    merged: dict[str, float] = {}
    for depth in range(1, len(parts) + 1):
        merged.update(stored.get("/" + "/".join(parts[:depth]), {}))
    return Attributes(**merged)
