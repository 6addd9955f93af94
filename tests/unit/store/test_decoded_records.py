"""The Redis store's decoded-record cache (codec.DecodedRecords): a record is found by its blob's exact bytes."""

from __future__ import annotations

from devicehub.domain.model import Device
from devicehub.store.redis.codec import DecodedRecords, encode


def _device(name: str, updated_at: float = 2.0) -> Device:
    return Device(
        id="0" * 32, account_id="a" * 32, endpoint_name=name, created_at=1.0, updated_at=updated_at, last_seen_at=3.0
    )


def test_the_same_blob_gives_the_record_decoded_once() -> None:
    decoded = DecodedRecords(Device, capacity=10)
    blob = encode(_device("dev-1"))
    first = decoded(blob)
    assert first == _device("dev-1")
    assert decoded(bytes(blob)) is first  # equal bytes from another reply: no second decode


def test_a_changed_record_is_decoded_from_its_new_blob() -> None:
    decoded = DecodedRecords(Device, capacity=10)
    decoded(encode(_device("dev-1")))
    assert decoded(encode(_device("dev-1", updated_at=9.0))).updated_at == 9.0


def test_the_cache_holds_at_most_its_capacity() -> None:
    decoded = DecodedRecords(Device, capacity=3)
    blobs = [encode(_device(f"dev-{i}")) for i in range(7)]
    records = [decoded(blob) for blob in blobs]
    assert len(decoded) <= 3
    assert [decoded(blob) for blob in blobs] == records  # still right after it was emptied


def test_a_record_kept_by_its_writer_is_found_without_a_decode() -> None:
    """Issue 30 #5: a registration batch keeps the records it writes, so its index step's read of them decodes
    nothing; a blob kept with another record than its own would show here as that record."""
    decoded = DecodedRecords(Device, capacity=3)
    written = _device("dev-1")
    blob = encode(written)
    decoded.keep(blob, written)
    assert decoded(bytes(blob)) is written
    for i in range(5):  # bounded as the records it decodes
        decoded.keep(encode(_device(f"dev-{i + 2}")), _device(f"dev-{i + 2}"))
    assert len(decoded) <= 3
