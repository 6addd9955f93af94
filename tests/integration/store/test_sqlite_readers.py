"""The SQLite store's REST reads run on reader connections (issue 15): a write stalled on the writer thread, with
its transaction open, and the reads the hot endpoints make are answered meanwhile, their own writes included."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from devicehub.domain.model import (
    Account,
    ApiKey,
    DesiredValue,
    Device,
    DeviceRequest,
    ReportedValue,
    ResourceLink,
    SnapshotResource,
)
from devicehub.store.sqlite.read_cache import ReadCache
from devicehub.store.sqlite.store import SqliteStore
from support.stall import stalled_write_committed, stalled_writer
from support.stores import minting

TIMES = {"created_at": 1.0, "updated_at": 1.0, "last_seen_at": 1.0}
WAIT = 10.0  # bound on each wait below; they end on a condition, never on the timeout


def test_hot_path_reads_are_answered_while_a_write_is_stalled(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.create_account(Account(id="a1", name="acme", tier="commercial", created_at=1.0))
            key = ApiKey(id="k1", account_id="a1", name="", key_hash="h1", created_at=1.0)
            await store.create_key(key)
            device = Device(
                id="d1", account_id="a1", endpoint_name="ep1", created_at=1.0, updated_at=1.0, last_seen_at=1.0
            )
            await store.put_device(device)
            await store.ensure_resources("d1", ["/3/0/0"])
            await store.add_subscription("k1", "d1", "/3/0/0")
            request = DeviceRequest(
                async_id="r1",
                key_id="k1",
                account_id="a1",
                device_id="d1",
                method="GET",
                uri="/3",
                created_at=1.0,
                expires_at=9.0,
            )
            await store.enqueue_request(request)
            async with stalled_writer(store) as stalled:
                reads = await asyncio.wait_for(
                    asyncio.gather(
                        store.find_key_by_hash("h1"),
                        store.get_account("a1"),
                        store.get_device("d1"),
                        store.list_devices("a1"),
                        store.count_devices("a1"),
                        store.get_snapshot("d1"),
                        store.list_subscriptions("k1", "d1"),
                        store.find_request("k1", "r1"),
                        store.pending_requests("d1"),
                    ),
                    WAIT,
                )
                assert not stalled.done()  # every read was answered while the write still held the writer
            assert reads[0] == key and reads[2] == device and reads[3] == [device] and reads[4] == 1
            assert [r.path for r in reads[5]] == ["/3/0/0"]
            assert reads[6] == ["/3/0/0"] and reads[7] == request and reads[8] == [request]
            assert await stalled_write_committed(store)  # and the stalled write did commit
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_directory_page_read_while_a_device_write_is_stalled_is_not_served_after_that_write(tmp_path: Path) -> None:
    """Pages are kept in memory (issue 15): one read before a device write committed must not outlive the commit."""

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            first = Device(id="d1", account_id="a1", endpoint_name="ep1", **TIMES)
            second = Device(id="d2", account_id="a1", endpoint_name="ep2", **TIMES)
            await store.put_device(first)
            assert await store.list_devices("a1") == [first]
            async with stalled_writer(store):
                writing = asyncio.ensure_future(store.put_device(second))  # queued behind the stalled write
                await asyncio.sleep(0)
                assert await asyncio.wait_for(store.list_devices("a1"), WAIT) == [first]  # not committed yet
                assert not writing.done()
            await writing
            assert await store.list_devices("a1") == [first, second]
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_subscription_added_while_its_removal_waits_is_written_after_it(tmp_path: Path) -> None:
    """A stored subscription is added again from memory (issue 15), but not once a removal of it has begun."""

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.add_subscription("k1", "d1", "/3/0/0")
            await asyncio.wait_for(store.add_subscription("k1", "d1", "/3/0/0"), WAIT)  # stored: no write
            async with stalled_writer(store):
                removing = asyncio.ensure_future(store.remove_subscription("k1", "d1", "/3/0/0"))
                await asyncio.sleep(0)  # the removal is queued behind the stalled write
                adding = asyncio.ensure_future(store.add_subscription("k1", "d1", "/3/0/0"))
                await asyncio.sleep(0)
                assert not removing.done() and not adding.done()  # the add waits for its own write after it
            assert await removing and await adding is None
            assert await store.subscribers("d1") == [("k1", "/3/0/0")]
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_snapshot_read_sees_reported_values_whose_flush_is_stalled(tmp_path: Path) -> None:
    """Read-your-writes without a flush: values pending or in flight are laid over the reader's rows."""

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.ensure_resources("d1", ["/3303/0/5700"])  # /3303/0/5701 has no row before its flush
            first = ReportedValue(value=b"21.5", content_type="text/plain", reported_at=5.0)
            await store.set_reported("d1", "/3303/0/5700", first)
            async with stalled_writer(store):
                flushing = asyncio.ensure_future(store._reported.flush())  # queued behind the stalled write
                await asyncio.sleep(0)  # one loop turn: the flush takes the pending values and waits for the writer
                assert store._reported._writing and not flushing.done()
                newer = ReportedValue(value=b"C", content_type="text/plain", reported_at=6.0)
                await store.set_reported("d1", "/3303/0/5701", newer)  # pending, behind the in-flight batch
                snapshot = await asyncio.wait_for(store.get_snapshot("d1"), WAIT)
                assert not flushing.done()
                assert {r.path: r.reported for r in snapshot} == {"/3303/0/5700": first, "/3303/0/5701": newer}
            await flushing
            assert {r.path: r.reported for r in await store.get_snapshot("d1")}["/3303/0/5700"] == first
        finally:
            await store.close()
        reopened = SqliteStore(tmp_path)  # close() wrote what was pending: nothing lost on a graceful stop
        await reopened.open()
        try:
            assert {r.path: r.reported for r in await reopened.get_snapshot("d1")}["/3303/0/5701"] == newer
        finally:
            await reopened.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_read_cache_follows_every_write_and_matches_the_database(tmp_path: Path) -> None:
    """Devices and snapshots served from memory after a first read; each write shows at once, and what the cache
    serves is what a fresh store reads from the file."""

    async def scenario() -> tuple[list[SnapshotResource], Device | None]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            device = Device(id="d1", account_id="a1", endpoint_name="e", **TIMES)
            await store.put_device(device)
            await store.ensure_resources("d1", ["/3/0/0", "/3/0/1"])
            assert await store.get_device("d1") == device and len(await store.get_snapshot("d1")) == 2  # cached
            renamed = msgspec.structs.replace(device, name="boiler")
            await store.put_device(renamed)
            assert await store.get_device("d1") == renamed
            desired = DesiredValue(value=b"1", desired_at=2.0, status=0, status_updated_at=2.0)
            await store.set_desired("d1", "/3/0/1", desired)
            await store.set_subscribed("d1", "/3/0/0", True)
            await store.ensure_resources("d1", ["/3/0/2"])
            value = ReportedValue(value=b"x", content_type="text/plain", reported_at=3.0)
            await store.set_reported("d1", "/3/0/9", value)
            served = await store.get_snapshot("d1")
            assert [(r.path, r.subscribed) for r in served] == [
                ("/3/0/0", True),
                ("/3/0/1", False),
                ("/3/0/2", False),
                ("/3/0/9", False),
            ]
            assert served[1].desired == desired and served[3].reported == value
            await store.clear_subscribed("d1")
            served = await store.get_snapshot("d1")
            assert not any(r.subscribed for r in served)
            # a batch of full registrations (the registration path's write): new resources, subscriptions ended
            await store.set_subscribed("d1", "/3/0/1", True)
            registered = msgspec.structs.replace(renamed, resources=(ResourceLink(path="/3/0/7"),), updated_at=4.0)
            await store.put_registered_devices([registered])
            assert await store.get_device("d1") == registered
            served = await store.get_snapshot("d1")
            assert "/3/0/7" in {r.path for r in served} and not any(r.subscribed for r in served)
            await store.put_device(Device(id="d2", account_id="a1", endpoint_name="f", **TIMES))
            await store.get_snapshot("d2")
            await store.delete_device("d2")
            assert await store.get_device("d2") is None and await store.get_snapshot("d2") == []
        finally:
            await store.close()
        fresh = SqliteStore(tmp_path)
        await fresh.open()
        try:
            assert await fresh.get_snapshot("d1") == served
            return served, await fresh.get_device("d1")
        finally:
            await fresh.close()

    served, stored = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert stored is not None and stored.name == "boiler" and len(served) == 5


def test_a_load_that_raced_a_write_does_not_fill_the_cache() -> None:
    cache = ReadCache()
    stale = Device(id="d1", account_id="a1", endpoint_name="e", **TIMES)
    epoch = cache.epoch("d1")  # a load begins
    cache.touch("d1")  # a write of d1 begins (and commits) meanwhile
    cache.fill_device(stale, epoch)
    cache.fill_snapshot("d1", [SnapshotResource(path="/3/0/0")], epoch)
    assert cache.device("d1") is None and cache.snapshot("d1") is None
    cache.fill_device(stale, cache.epoch("d1"))  # a load with nothing racing it fills
    assert cache.device("d1") == stale


def test_a_device_reporting_values_keeps_its_snapshot_in_the_read_cache(tmp_path: Path) -> None:
    """A reported value goes to the write-behind, not the database: it must not evict the device's cached snapshot
    (every notification did, so the echo of any active device was read from SQLite again)."""

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.put_device(Device(id="d1", account_id="a1", endpoint_name="e", **TIMES))
            await store.ensure_resources("d1", ["/3303/0/5700"])
            # the first load runs while the device reports: its value arrives during the reader's query
            load = asyncio.ensure_future(store.get_snapshot("d1"))
            await asyncio.sleep(0)  # one scheduling step: the load is now waiting for its reader thread
            first = ReportedValue(value=b"21.5", content_type="text/plain", reported_at=1.0)
            await store.set_reported("d1", "/3303/0/5700", first)
            assert (await load)[0].reported == first  # laid over the rows it read
            assert store._cache.snapshot("d1") is not None, "a reported value kept the load out of the cache"
            for n in range(20):
                value = ReportedValue(value=str(n).encode(), content_type="text/plain", reported_at=float(n))
                await store.set_reported("d1", "/3303/0/5700", value)
            cached = store._cache.snapshot("d1")
            assert cached is not None, "the notifications evicted the cached snapshot"
            assert cached[0].reported == value
            assert await store.get_snapshot("d1") == cached
        finally:
            await store.close()
        fresh = SqliteStore(tmp_path)
        await fresh.open()
        try:
            assert (await fresh.get_snapshot("d1"))[0].reported == value  # and the write-behind wrote it
        finally:
            await fresh.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_register_is_admitted_while_the_writer_is_stalled(tmp_path: Path) -> None:
    """issue 16 #1: admission (enrolment, the id of a known name, a new name's claim) and a registration batch's read
    of its devices are answered from memory, never queued behind a write; the directory admission reads is loaded
    again from the tables on reopen."""

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.enroll("b", "enrolled-ep")
            known = _device("d" * 32, "known-ep")
            await store.put_device(known)
            async with stalled_writer(store) as stalled:
                admitted = await asyncio.wait_for(
                    asyncio.gather(
                        store.admit_endpoint("known-ep", "a", minting("1" * 32)),
                        store.admit_endpoint("enrolled-ep", "a", minting("2" * 32)),
                        store.admit_endpoint("new-ep", "a", minting("3" * 32)),
                        store.admit_endpoint("new-ep", "a", minting("4" * 32)),
                        store.claim_device_id("a", "new-ep", minting("5" * 32)),
                    ),
                    WAIT,
                )
                # a registration batch's read of its devices: the known one from the read cache, the new one skipped
                assert await asyncio.wait_for(store.get_devices(["d" * 32, "3" * 32]), WAIT) == [known]
                assert not stalled.done()
            assert admitted == [("a", "d" * 32), ("b", "2" * 32), ("a", "3" * 32), ("a", "3" * 32), "3" * 32]
            assert await store.get_devices(["3" * 32]) == []  # reserved: in no table, and no query asked
            await store.put_registered_devices([_device("3" * 32, "new-ep")])
        finally:
            await store.close()
        reopened = SqliteStore(tmp_path)
        await reopened.open()
        try:
            assert await reopened.admit_endpoint("new-ep", "a", minting("6" * 32)) == ("a", "3" * 32)
            # the enrolment was loaded; the id reserved for it was never stored with a device, so it is not kept
            assert await reopened.admit_endpoint("enrolled-ep", None, minting("7" * 32)) == ("b", "7" * 32)
            assert await reopened.admit_endpoint("known-ep", "a", minting("8" * 32)) == ("a", "d" * 32)
        finally:
            await reopened.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def _device(device_id: str, endpoint_name: str) -> Device:
    return Device(id=device_id, account_id="a", endpoint_name=endpoint_name, **TIMES)
