"""A device as the directory shows it (`DeviceModel`), and each listed device's entry kept encoded (issue 30 #5).

A page of 1 000 devices built and encoded 1 000 models on every call (0.8 ms of its CPU, on either store), though
from one call to the next most devices are unchanged. Both stores hand out the same frozen record instance while a
device's stored record is unchanged (the Redis store's decoded records, the SQLite read cache), so an entry is kept
by device id with the record it was made from and its last contact, and reused only for that very instance and
that contact: any change to either makes a new one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
from aiohttp import web

from devicehub.api.models import DeviceModel
from devicehub.domain.model import Device
from devicehub.domain.timefmt import rfc3339

ENTRIES_KEPT = 10_000  # ten pages of 1 000; about 500 bytes each beside the record (which the stores keep anyway)

_encode = msgspec.json.Encoder().encode


def device_model(device: Device, last_contact: float | None = None) -> DeviceModel:
    return DeviceModel(
        id=device.id,
        account_id=device.account_id,
        endpoint_name=device.endpoint_name,
        endpoint_type=device.endpoint_type,
        name=device.name or device.endpoint_name,
        state=device.state,
        host_gateway=device.host_gateway,
        created_at=rfc3339(device.created_at),
        updated_at=rfc3339(device.updated_at),
        description=device.description,
        custom_attributes=device.custom_attributes,
        auto_update=device.auto_update,
        ca_id=device.ca_id,
        device_key=device.device_key,
        last_contact_at=rfc3339(last_contact) if last_contact else None,
    )


class DirectoryEntries:
    """Devices' directory entries as JSON, each encoded once per record instance and last contact; at most
    `capacity` kept (then all dropped at once: cheaper than an LRU's bookkeeping on every hit)."""

    def __init__(self, capacity: int = ENTRIES_KEPT) -> None:
        self._capacity = capacity
        self._kept: dict[str, tuple[Device, float | None, msgspec.Raw]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def encoded(self, devices: Sequence[Device], last: Mapping[str, float]) -> list[msgspec.Raw]:
        """Each device's entry with its last contact from `last` (none when absent), in order."""
        kept = self._kept
        entries = []
        for device in devices:
            contact = last.get(device.id)
            entry = kept.get(device.id)
            if entry is None or entry[0] is not device or entry[1] != contact:
                if len(kept) >= self._capacity:
                    kept.clear()
                entry = kept[device.id] = (device, contact, msgspec.Raw(_encode(device_model(device, contact))))
            entries.append(entry[2])
        return entries


DIRECTORY_ENTRIES = web.AppKey("directory_entries", DirectoryEntries)
