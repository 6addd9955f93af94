"""A device's last contact as readers see it: the latest of its record's `last_seen_at`, its stored contact and this
node's memory (domain/contacts.py)."""

from __future__ import annotations

from typing import cast

import msgspec

from devicehub.clock import ManualClock
from devicehub.domain.contacts import ContactBook
from devicehub.domain.storage.store import Store
from support.stores import device


def test_merged_takes_the_latest_of_the_record_the_store_and_memory_for_each_device() -> None:
    book = ContactBook(cast(Store, None), ManualClock())  # merging reads neither the store nor the clock
    devices = [msgspec.structs.replace(device(f"d{n}", f"ep{n}"), last_seen_at=100.0 + n) for n in range(5)]
    for device_id, at in {"d1": 50.0, "d2": 300.0, "d3": 400.0, "other": 999.0}.items():
        book.seen(device(device_id, f"ep-{device_id}"), at)  # a device this book holds no entry of: kept loose
    stored = {"d0": 90.0, "d2": 200.0, "d3": 500.0, "d4": 250.0, "other": 999.0}
    assert book.merged(devices, stored) == {"d0": 100.0, "d1": 101.0, "d2": 300.0, "d3": 500.0, "d4": 250.0}
    assert book.merged([], stored) == {}
