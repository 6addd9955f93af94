"""A registered device as this node holds it (issue 30 #1): what the notification path needs of it, in one place.

A value costs one look-up in the fleet-sized map of held devices (DeviceService._devices); everything else it needs
hangs off the entry found: the device's record, its last contact and whether that is waiting for the store
(ContactBook), and its routing answers (SubscriptionRouter). At 50 000 devices each further fleet-sized dict touched
per value cost ~0.4 us of cache misses (bench/README.md, issue 30, sixteenth session).
"""

from __future__ import annotations

import msgspec

from devicehub.domain.model import Device


class Held(msgspec.Struct, gc=False):
    """Mutable; untracked by the garbage collector (gc=False): it refers to no object that refers back to it, and a
    fleet of them is not walked by every collection."""

    device: Device  # the record notifications are routed with
    # the last path routed and the keys it reaches: most devices notify one path, whose answer is then read here
    # without a look-up in `routes`
    path: str | None = None
    keys: tuple[str, ...] = ()
    contact: float = 0.0  # last contact seen by this node; 0.0: none (or forgotten: the device was deleted)
    pending: bool = False  # the contact waits for the ContactBook's next write (the held is in its `pending` list)
    routes: dict[str, tuple[str, ...]] | None = None  # path -> keys it reaches; None: to be rebuilt (routes changed)

    def drop_routes(self) -> None:
        """Its routes changed (or it left): every answer is worked out again."""
        self.path = None
        self.routes = None
