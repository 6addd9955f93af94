"""Device-bound work a node took for a device whose transport session another node holds (issue 31 #1).

Several nodes share one store, and any of them takes an application's request; but only the node the device talks
to (its holder: the one that took its latest Register or Update) can reach it. The domain names the work and asks
its `DeviceHolders` port to hand it over; the port (channels/holders.py in Redis mode) records holders and carries
the work to the holder, whose `DeviceService.take_work` does it. Results go back as events through the channels,
as for work done locally. One node (SQLite) has no port and pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

REQUESTS = "requests"  # the device's request queue has work: read it from the store and deliver it
OBSERVE = "observe"  # observe `pattern` for `key_id` (answered as `async_id`), after reading the device's routes
CANCEL = "cancel"  # `pattern` was unsubscribed: read the routes again; cancel the observation none keeps
FIRMWARE = "firmware"  # update the device in campaign `pattern` of account `key_id` (domain/firmware/engine.py)
FIRMWARE_CANCEL = "firmware-cancel"  # campaign `pattern` stopped while the device downloaded: call the download off


class DeviceWork(msgspec.Struct, frozen=True, array_like=True):
    """One piece of work for the holder of `device_id`."""

    kind: str
    device_id: str
    key_id: str = ""
    pattern: str = ""
    async_id: str = ""
    # wall-clock seconds after which the work is void (0: none); work for a device no live node holds waits for the
    # device until then (an observe: its subscription's request expiry), and is answered REQUEST_EXPIRED past it
    expires_at: float = 0.0


class DeviceHolders(Protocol):
    """Which node holds which device, and the hand-over of work to it, as the domain sees them."""

    node_id: str  # this node's: the owner of the leases it takes

    def holds(self, device_id: str) -> bool:
        """Whether this node took the device's latest Register or Update (from memory: no store read)."""
        ...

    async def held_elsewhere(self, device_id: str) -> bool:
        """Whether another node that is alive holds the device (a store read: for the rare caller)."""
        ...

    async def took(self, device_ids: Sequence[str]) -> list[DeviceWork]:
        """This node took these devices' Registers or Updates: it holds them now (recorded once per device it did
        not hold, not once per Update). Returns the work that waited for these devices while no live node held
        them (`hand_over`), for the caller to do now."""
        ...

    async def released(self, device_id: str) -> None:
        """The device de-registered or expired here: this node holds it no more."""

    async def expired_waiting(self, now: float) -> list[DeviceWork]:
        """Work left waiting for a device no live node holds (`hand_over`) that is past its expiry at `now`
        (wall-clock seconds), taken out of the wait by this node, for the caller to answer: each piece is returned by
        one node only, and never also to the node that takes the device."""
        ...

    async def hand_over(self, work: DeviceWork) -> bool:
        """Give `work` to the live node that holds its device, or, when its holder is gone, leave an observe or a
        cancel waiting for the device: the node it reaches next takes it with the device (`took`). False when this
        node holds it, none does, or its holder is gone and the work is a request (its queue waits in the store):
        the caller then does the work here, or it waits for the device's next contact."""
        ...
