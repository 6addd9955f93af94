"""Directory entries kept encoded (api/directory_entries.py): the JSON of a page is the models' JSON, and an entry is
reused only for the very record instance and last contact it was made from."""

from __future__ import annotations

import msgspec

from devicehub.api.directory_entries import DirectoryEntries, device_model
from devicehub.api.models import DeviceList
from devicehub.domain.model import Device


def _device(n: int, **changes: object) -> Device:
    device = Device(
        id=f"{n:032x}",
        account_id="a" * 32,
        endpoint_name=f"ep-{n}",
        created_at=1.7e9 + n,
        updated_at=1.7e9 + 2 * n,
        last_seen_at=1.7e9,
        custom_attributes={"room": str(n)},
    )
    return msgspec.structs.replace(device, **changes)


def _page(data: list[object]) -> bytes:
    return msgspec.json.encode(DeviceList(data=data, has_more=True, limit=3, order="ASC"))  # type: ignore[arg-type]


def test_a_page_of_kept_entries_is_the_json_of_its_models() -> None:
    devices = [_device(1), _device(2, name="Boiler"), _device(3, state="deregistered")]
    last = {devices[0].id: 1.7e9 + 30.5, devices[2].id: 1.7e9 + 1}
    entries = DirectoryEntries()
    expected = _page([device_model(d, last.get(d.id)) for d in devices])
    assert _page(list(entries.encoded(devices, last))) == expected
    assert _page(list(entries.encoded(devices, last))) == expected  # the kept entries, unchanged


def test_an_entry_is_reused_only_for_the_same_record_instance_and_last_contact() -> None:
    device = _device(1)
    entries = DirectoryEntries()
    (first,) = entries.encoded([device], {device.id: 5.0})
    assert entries.encoded([device], {device.id: 5.0})[0] is first
    (moved,) = entries.encoded([device], {device.id: 6.0})  # a later contact
    assert moved is not first and b'"last_contact_at":"1970-01-01T00:00:06.000Z"' in bytes(moved)
    renamed = msgspec.structs.replace(device, name="Boiler")  # a new record of the same device
    assert b'"name":"Boiler"' in bytes(entries.encoded([renamed], {device.id: 6.0})[0])
    equal = msgspec.structs.replace(renamed)  # equal, but another instance: made again, never assumed the same
    assert entries.encoded([equal], {device.id: 6.0})[0] is not entries.encoded([renamed], {device.id: 6.0})[0]


def test_at_most_capacity_entries_are_kept() -> None:
    entries = DirectoryEntries(capacity=3)
    devices = [_device(n) for n in range(7)]
    assert len(entries.encoded(devices, {})) == 7
    assert 1 <= len(entries) <= 3
