"""The device state snapshot on both stores: reported, desired and subscribed per resource."""

from __future__ import annotations

from devicehub.domain.model import (
    DesiredValue,
    LastSuccess,
    ReportedValue,
    SnapshotResource,
)
from devicehub.domain.storage.store import Store
from support.stores import StoreFactory, reopen, run


def test_snapshot_fields_merge_and_new_resources_do_not_overwrite(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        reported = ReportedValue(value=b"21.5", content_type="text/plain", reported_at=3.0)
        desired = DesiredValue(value=b"1", desired_at=4.0, status=0, status_updated_at=4.0)
        await store.set_reported("d1", "/3303/0/5700", reported)
        await store.set_desired("d1", "/3303/0/5700", desired)
        await store.set_subscribed("d1", "/3303/0/5700", True)
        await store.ensure_resources("d1", ["/3303/0/5700", "/3/0/0"])
        assert await store.get_snapshot("d1") == [
            SnapshotResource(path="/3/0/0"),
            SnapshotResource(path="/3303/0/5700", reported=reported, desired=desired, subscribed=True),
        ]
        await store.clear_subscribed("d1")
        assert [r.subscribed for r in await store.get_snapshot("d1")] == [False, False]

    run(make_store, scenario)


def test_reported_values_set_together_are_read_as_set_one_by_one_the_later_of_a_path_winning(
    make_store: StoreFactory,
) -> None:
    """`set_reported_many` (a receive batch's values, issue 15 #2): several devices and paths at once, a path given
    twice keeps the later value; read back at once and after a reopen (the write-behind flushes on close)."""

    def value(text: bytes, at: float) -> ReportedValue:
        return ReportedValue(value=text, content_type="text/plain", reported_at=at)

    expected = {
        "d1": [
            SnapshotResource(path="/3/0/9", reported=value(b"88", 1.0)),
            SnapshotResource(path="/3303/0/5700", reported=value(b"21.5", 2.0)),
        ],
        "d2": [SnapshotResource(path="/3303/0/5700", reported=value(b"7", 1.0))],
    }

    async def check(store: Store) -> None:
        for device_id, resources in expected.items():
            assert await store.get_snapshot(device_id) == resources

    async def scenario(store: Store) -> None:
        await store.set_reported_many(
            [
                ("d1", "/3303/0/5700", value(b"20.5", 1.0)),
                ("d2", "/3303/0/5700", value(b"7", 1.0)),
                ("d1", "/3/0/9", value(b"88", 1.0)),
                ("d1", "/3303/0/5700", value(b"21.5", 2.0)),
            ]
        )
        await check(store)

    run(make_store, scenario)
    reopen(make_store, check)


def test_desired_value_keeps_content_type_request_and_last_success(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        desired = DesiredValue(
            value=b"\xa1\x01\xf5",
            desired_at=9.0,
            status=2,
            status_updated_at=9.5,
            content_type="application/vnd.oma.lwm2m+cbor",
            request_id="k1/w2",
            last_success=LastSuccess(value=b"0", content_type="text/plain", desired_at=5.0),
        )
        assert await store.get_desired("d1", "/3311/0/5850") is None
        await store.set_desired("d1", "/3311/0/5850", desired)
        assert await store.get_snapshot("d1") == [SnapshotResource(path="/3311/0/5850", desired=desired)]
        # one resource's desired value on its own (a write request reads only that)
        assert await store.get_desired("d1", "/3311/0/5850") == desired
        await store.ensure_resources("d1", ["/3311/0/5851"])
        assert await store.get_desired("d1", "/3311/0/5851") is None
        assert await store.get_desired("d2", "/3311/0/5850") is None

    run(make_store, scenario)
