"""Device records and the directory's queries over them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.model import Device, ReportedValue
from devicehub.domain.storage.device_query import DeviceQuery


class DeviceStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def put_device(self, device: Device) -> None:
        """Insert or replace by id; (account_id, endpoint_name) stays unique."""

    async def get_device(self, device_id: str) -> Device | None: ...
    async def get_devices(self, device_ids: Sequence[str]) -> list[Device]:
        """The stored devices among `device_ids` (unknown ids are left out), in no particular order."""

    async def put_registered_devices(
        self,
        devices: Sequence[Device],
        unchanged: Sequence[str] = (),
        reported: Sequence[tuple[str, str, ReportedValue]] = (),
    ) -> None:
        """Full registrations of many devices at once (issue 16 #1): each device inserted or replaced, a snapshot
        entry added for each of its resources (existing ones kept), and every resource subscription on it dropped
        with the snapshot's subscribed marks (spec §2.1). `unchanged`: ids of devices registered again whose stored
        record stays as it is: only their subscriptions and marks are dropped (nothing is written when they have
        none). `reported`: (device id, path, value) the registrations announced (spec §2.4), stored as
        `set_reported` after this call would store them, but with the entries in the same write."""

    async def find_device(self, account_id: str, endpoint_name: str) -> Device | None: ...
    async def list_devices(
        self,
        account_id: str,
        *,
        state: str | None = None,
        query: DeviceQuery | None = None,
        after: str | None = None,
        limit: int = 50,
        descending: bool = False,
    ) -> list[Device]:
        """Devices matching `query` (and `state`), ordered by device id (descending on request); `after` is an
        exclusive device id cursor in that order."""

    async def list_devices_and_contacts(
        self,
        account_id: str,
        *,
        query: DeviceQuery | None = None,
        after: str | None = None,
        limit: int = 50,
        descending: bool = False,
    ) -> tuple[list[Device], dict[str, float]]:
        """`list_devices`, with the stored last contact (`ContactStore.get_contacts`) of each device it lists, read
        together: a directory page shows both (issue 30 #5: on Redis in the page's round trip, not one after it).
        The devices are as `list_devices` gives them but that their `resources` may be left out (a page shows none:
        on Redis a page reads each device's directory summary, not its whole record)."""

    async def count_devices(
        self, account_id: str, *, state: str | None = None, query: DeviceQuery | None = None
    ) -> int:
        """Exactly how many devices `list_devices` would page through with the same filters."""

    async def delete_device(self, device_id: str) -> None:
        """Removes the device, its snapshot, its subscriptions and its pending requests."""

    async def devices_last_seen_before(self, cutoff: float, limit: int = 1000) -> list[str]: ...
