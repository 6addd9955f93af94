"""One shared copy of equal immutable values that many devices hold (issue 16: memory per registered device).

A fleet registers the same links over and over (`</3/0/0>`, `</3303/0/5700>;obs`…): without sharing, 100 000
devices hold 100 000 equal copies of each link and of each resource record built from it, about half of a
registered device's memory. The table is bounded: when it is full it starts afresh (values already shared stay
shared; unique values, such as serial numbers in `;v=`, never pin more than `capacity` entries).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class InternTable(Generic[V]):
    """key → the one value built for it; `make` runs only for a key not seen since the table last started."""

    def __init__(self, make: Callable[..., V], capacity: int = 65_536) -> None:
        self._make = make
        self._capacity = capacity
        self._values: dict[Hashable, V] = {}

    def get(self, key: tuple[Hashable, ...]) -> V:
        value = self._values.get(key)
        if value is None:
            if len(self._values) >= self._capacity:
                self._values = {}
            value = self._values[key] = self._make(*key)
        return value

    def __len__(self) -> int:
        return len(self._values)
