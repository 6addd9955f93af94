"""Device records on both stores: uniqueness, listing, the full-registration batch, and the delete cascade."""

from __future__ import annotations

import msgspec

from devicehub.domain.model import (
    Device,
    ReportedValue,
)
from devicehub.domain.storage.store import Store
from support.stores import A, B, StoreFactory, device, reopen, request, run


def test_devices_are_unique_per_endpoint_and_listed_by_id_with_cursor_and_state(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        for n in range(5):
            await store.put_device(device(f"d{n}", f"ep{n}", state="registered" if n % 2 == 0 else "deregistered"))
        await store.put_device(device("z9", "other", account=B))
        assert [d.id for d in await store.list_devices(A)] == ["d0", "d1", "d2", "d3", "d4"]
        assert [d.id for d in await store.list_devices(A, after="d1", limit=2)] == ["d2", "d3"]
        assert [d.id for d in await store.list_devices(A, state="registered")] == ["d0", "d2", "d4"]
        assert await store.count_devices(A) == 5 and await store.count_devices(A, state="deregistered") == 2
        await store.put_device(device("d1", "ep1", state="registered"))  # replaced in place, index follows
        assert await store.count_devices(A, state="deregistered") == 1
        found = await store.find_device(A, "ep1")
        assert found is not None and found.state == "registered"
        assert await store.find_device(B, "ep1") is None

    async def listed_after_reopen(store: Store) -> None:  # nothing cached yet: every record is read from disk
        listed = await store.list_devices(A, state="registered")
        assert [(d.id, d.state) for d in listed] == [
            ("d0", "registered"),
            ("d1", "registered"),
            ("d2", "registered"),
            ("d4", "registered"),
        ]
        assert [d.endpoint_name for d in await store.list_devices(A, after="d0", limit=2)] == ["ep1", "ep2"]

    run(make_store, scenario)
    reopen(make_store, listed_after_reopen)


def test_a_listing_follows_every_device_change(make_store: StoreFactory) -> None:
    """The same page asked again after each kind of device write lists what that write left (SQLite keeps pages
    in memory until a device record changes: issue 15)."""

    async def scenario(store: Store) -> None:
        async def page() -> list[tuple[str, str]]:
            return [(d.id, d.state) for d in await store.list_devices(A, limit=10)]

        await store.put_device(device("d1", "ep1"))
        assert await page() == [("d1", "registered")] and await page() == [("d1", "registered")]
        await store.put_device(device("d2", "ep2"))
        assert await page() == [("d1", "registered"), ("d2", "registered")]
        await store.put_device(device("d1", "ep1", state="deregistered"))
        assert await page() == [("d1", "deregistered"), ("d2", "registered")]
        await store.put_registered_devices([device("d0", "ep0"), device("d1", "ep1")])
        assert await page() == [("d0", "registered"), ("d1", "registered"), ("d2", "registered")]
        await store.delete_device("d2")
        assert await page() == [("d0", "registered"), ("d1", "registered")]

    run(make_store, scenario)


def test_delete_device_removes_snapshot_subscriptions_and_requests(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_device(device("d1", "ep1"))
        await store.add_subscription("k1", "d1", "/3/0/0")
        await store.ensure_resources("d1", ["/3/0/0"])
        await store.enqueue_request(request("r1"))
        await store.delete_device("d1")
        assert await store.get_device("d1") is None and await store.find_device(A, "ep1") is None
        assert await store.subscribers("d1") == [] and await store.list_subscriptions("k1", "d1") == []
        assert await store.pending_requests("d1") == [] and await store.all_pending_requests() == []
        assert await store.get_snapshot("d1") == []
        assert await store.count_devices(A) == 0

    run(make_store, scenario)


def test_devices_last_seen_before_a_cutoff(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_device(device("old", "e1", seen=10.0))
        await store.put_device(device("new", "e2", seen=50.0))
        assert await store.devices_last_seen_before(50.0) == ["old"]

    run(make_store, scenario)


def test_a_batch_of_full_registrations_stores_devices_and_drops_their_subscriptions(make_store: StoreFactory) -> None:
    """issue 16 #1: `put_registered_devices` does for many devices what a full registration does for one."""
    from devicehub.domain.model import ResourceLink

    def registered(device_id: str, name: str, *paths: str) -> Device:
        return msgspec.structs.replace(
            device(device_id, name), resources=tuple(ResourceLink(path=p) for p in paths), lifetime=60
        )

    async def scenario(store: Store) -> None:
        await store.put_device(device("d1", "ep-1"))
        await store.add_subscription("k1", "d1", "/3/0/0")
        await store.set_subscribed("d1", "/3/0/0", True)
        await store.add_subscription("k1", "d9", "/3/0/0")  # another device's: kept
        await store.add_subscription("k2", "d1", "/3/0/1")  # a second key's subscription to d1: dropped too
        await store.put_device(msgspec.structs.replace(device("d2", "ep-old"), state="deregistered"))
        assert await store.get_devices([]) == []
        await store.put_registered_devices([])
        batch = [registered("d1", "ep-1", "/3/0/0", "/3/0/1"), registered("d2", "ep-2", "/1/0/1")]
        await store.put_registered_devices(batch)
        assert sorted(await store.get_devices(["d2", "d1", "nope"]), key=lambda d: d.id) == batch
        assert await store.list_subscriptions("k1", "d1") == []
        assert await store.list_subscriptions("k1", "d9") == ["/3/0/0"]
        snapshot = await store.get_snapshot("d1")
        assert [(e.path, e.subscribed) for e in snapshot] == [("/3/0/0", False), ("/3/0/1", False)]
        assert [e.path for e in await store.get_snapshot("d2")] == ["/1/0/1"]
        assert await store.count_devices(A) == 2
        assert await store.list_subscriptions("k2", "d1") == [] and await store.subscribers("d1") == []
        # a device that comes back under another name, in another state, leaves no trace of the old ones
        assert await store.find_device(A, "ep-old") is None and (await store.find_device(A, "ep-2")) == batch[1]
        assert await store.list_devices(A, state="deregistered") == []
        # registered again as it was (`unchanged`): its record stays, its subscriptions and marks go
        await store.add_subscription("k1", "d2", "/1/0/1")
        await store.set_subscribed("d2", "/1/0/1", True)
        await store.put_registered_devices([], unchanged=["d2"])
        assert await store.get_device("d2") == batch[1] and await store.subscribers("d2") == []
        assert [(e.path, e.subscribed) for e in await store.get_snapshot("d2")] == [("/1/0/1", False)]

    run(make_store, scenario)


def test_values_announced_in_a_batch_of_registrations_are_stored_with_it(make_store: StoreFactory) -> None:
    """issue 16: the `v=` values of a batch of Registers are written with the snapshot entries (one write, not the
    empty entry and then the value), read back as `set_reported` would leave them; a value the write-behind still
    holds for the same resource (reported before) is older and does not win over the registration's."""
    from devicehub.domain.model import ResourceLink

    def registered(device_id: str, name: str, *paths: str) -> Device:
        return msgspec.structs.replace(device(device_id, name), resources=tuple(ResourceLink(path=p) for p in paths))

    def value(text: bytes, at: float) -> ReportedValue:
        return ReportedValue(value=text, content_type="text/plain", reported_at=at)

    async def write(store: Store) -> None:
        await store.set_reported("d1", "/3/0/0", value(b"old", 1.0))  # held by the write-behind, not written yet
        batch = [registered("d1", "ep-1", "/3/0/0", "/3/0/1", "/3/0/2"), registered("d2", "ep-2", "/1/0/1")]
        reported = [("d1", "/3/0/0", value(b"new", 2.0)), ("d1", "/3/0/1", value(b"7", 2.0))]
        await store.put_registered_devices(batch, reported=reported)
        await store.put_registered_devices([], unchanged=["d2"], reported=[("d2", "/1/0/1", value(b"60", 3.0))])
        await check(store)

    async def check(store: Store) -> None:
        assert [(e.path, e.reported) for e in await store.get_snapshot("d1")] == [
            ("/3/0/0", value(b"new", 2.0)),
            ("/3/0/1", value(b"7", 2.0)),
            ("/3/0/2", None),
        ]
        assert [(e.path, e.reported) for e in await store.get_snapshot("d2")] == [("/1/0/1", value(b"60", 3.0))]

    run(make_store, write)
    reopen(make_store, check)
