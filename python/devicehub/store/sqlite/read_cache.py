"""The embedded store's read cache (issue 15): devices and snapshots the REST hot paths read, kept in memory.

The SQLite store is the one process writing its database (a second node needs Redis), so every change passes
through it: each write updates the cache after it commits; a read that misses loads from a reader connection and
fills the cache only when no change to that device began meanwhile (a change moves the device's epoch before its
write and again after it commits, so a load that raced it is dropped instead of installing stale rows).
Directory pages (`list_devices`) are kept the same way under one directory epoch that every change of a device
record moves: any such change empties them. The resource subscriptions known to be stored are kept per device
under the device's epoch, so that subscribing again to what is stored costs no write.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

import msgspec

from devicehub.domain.model import Device, ReportedValue, SnapshotResource

BUCKETS = 1024  # epochs are kept per bucket of device ids: bounded memory, a collision only costs a missed fill
MAX_DEVICES = 100_000
MAX_SNAPSHOTS = 20_000
MAX_LISTINGS = 256  # directory pages kept (distinct account, filter, cursor, limit and order)
MAX_SUBSCRIPTIONS_PER_DEVICE = 256  # (key, path) pairs known stored per device; beyond that each add writes

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReadCache:
    def __init__(self, max_devices: int = MAX_DEVICES, max_snapshots: int = MAX_SNAPSHOTS) -> None:
        self._max_devices = max_devices
        self._max_snapshots = max_snapshots
        self._devices: dict[str, Device] = {}
        self._snapshots: dict[str, dict[str, SnapshotResource]] = {}
        self._epochs = [0] * BUCKETS
        self._listings: dict[Hashable, list[Device]] = {}
        self._subscriptions: dict[str, set[tuple[str, str]]] = {}  # device-id → (key-id, path) known committed
        self._directory_epoch = 0

    def epoch(self, device_id: str) -> int:
        """Taken before a load; the load may fill the cache only if it has not moved since."""
        return self._epochs[hash(device_id) % BUCKETS]

    def touch(self, device_id: str) -> None:
        """A change of the device begins or has committed: loads running now must not fill the cache."""
        self._epochs[hash(device_id) % BUCKETS] += 1

    # ---- devices ------------------------------------------------------------------------------------
    def device(self, device_id: str) -> Device | None:
        return self._devices.get(device_id)

    def fill_device(self, device: Device, epoch: int) -> None:
        if epoch == self.epoch(device.id):
            self._put(self._devices, device.id, device, self._max_devices)

    def put_device(self, device: Device) -> None:
        """After the device's write committed."""
        self.touch(device.id)
        self.directory_changed()
        self._put(self._devices, device.id, device, self._max_devices)

    def forget(self, device_id: str) -> None:
        """After the device and its snapshot were deleted."""
        self.touch(device_id)
        self.directory_changed()
        self._devices.pop(device_id, None)
        self._snapshots.pop(device_id, None)
        self._subscriptions.pop(device_id, None)

    # ---- resource subscriptions ---------------------------------------------------------------------
    def has_subscription(self, device_id: str, key_id: str, path: str) -> bool:
        """Committed and no removal of the device's subscriptions begun since."""
        entry = self._subscriptions.get(device_id)
        return entry is not None and (key_id, path) in entry

    def fill_subscription(self, device_id: str, key_id: str, path: str, epoch: int) -> None:
        """After the subscription's write committed, if no change of the device began since `epoch` was taken."""
        if epoch != self.epoch(device_id):
            return
        entry = self._subscriptions.get(device_id)
        if entry is None:
            entry = set()
            self._put(self._subscriptions, device_id, entry, self._max_devices)
        if len(entry) < MAX_SUBSCRIPTIONS_PER_DEVICE:
            entry.add((key_id, path))

    def drop_subscriptions(self, device_id: str) -> None:
        """Before a removal of (some of) the device's subscriptions is written, and again after it committed."""
        self.touch(device_id)
        self._subscriptions.pop(device_id, None)

    # ---- directory pages ----------------------------------------------------------------------------
    def directory_epoch(self) -> int:
        """Taken before a listing is read; the page may be kept only if it has not moved since."""
        return self._directory_epoch

    def directory_changed(self) -> None:
        """A device record is about to change or has committed: no page read before stays."""
        self._directory_epoch += 1
        self._listings.clear()

    def listing(self, key: Hashable) -> list[Device] | None:
        return self._listings.get(key)

    def fill_listing(self, key: Hashable, devices: list[Device], epoch: int) -> None:
        if epoch == self._directory_epoch:
            self._put(self._listings, key, devices, MAX_LISTINGS)

    # ---- snapshots ----------------------------------------------------------------------------------
    def snapshot(self, device_id: str) -> list[SnapshotResource] | None:
        entry = self._snapshots.get(device_id)
        return None if entry is None else [entry[path] for path in sorted(entry)]

    def resource(self, device_id: str, path: str) -> SnapshotResource | None:
        """A cached snapshot's entry for `path`; None when the device's snapshot is not cached or has no such path."""
        entry = self._snapshots.get(device_id)
        return None if entry is None else entry.get(path)

    def fill_snapshot(self, device_id: str, resources: list[SnapshotResource], epoch: int) -> None:
        if epoch == self.epoch(device_id):
            self._put(self._snapshots, device_id, {r.path: r for r in resources}, self._max_snapshots)

    def update(self, device_id: str, path: str, **changes: object) -> None:
        """One resource's row changed (created when missing, as the store's upsert does)."""
        self.touch(device_id)
        entry = self._snapshots.get(device_id)
        if entry is not None:
            entry[path] = msgspec.structs.replace(entry.get(path) or SnapshotResource(path=path), **changes)

    def set_reported(self, device_id: str, path: str, reported: ReportedValue) -> None:
        """A reported value went into the store's write-behind, not to the database. No epoch move: a load
        running now lays the write-behind's values over its rows (SqliteStore.get_snapshot), so it stays right."""
        entry = self._snapshots.get(device_id)
        if entry is not None:
            entry[path] = msgspec.structs.replace(entry.get(path) or SnapshotResource(path=path), reported=reported)

    def ensure(self, device_id: str, paths: Iterable[str]) -> None:
        self.touch(device_id)
        entry = self._snapshots.get(device_id)
        if entry is not None:
            for path in paths:
                entry.setdefault(path, SnapshotResource(path=path))

    def clear_subscribed(self, device_id: str) -> None:
        self.touch(device_id)
        entry = self._snapshots.get(device_id)
        if entry is not None:
            for path, resource in entry.items():
                if resource.subscribed:
                    entry[path] = msgspec.structs.replace(resource, subscribed=False)

    @staticmethod
    def _put(table: dict[K, V], key: K, value: V, limit: int) -> None:
        if key not in table and len(table) >= limit:
            table.pop(next(iter(table)))  # the oldest entry goes: insertion order
        table[key] = value
