"""The device-request queue on both stores: order, look-ups, the de-dup and bound checked in the queueing step, and a
write request's desired value stored with it or not at all."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ResponseError

from devicehub.domain.model import DesiredValue, DeviceRequest
from devicehub.domain.storage.store import Store
from devicehub.errors import DuplicateAsyncId, QueueFull, StorageUnavailable
from devicehub.store import is_shared
from devicehub.store.redis.store import RedisStore
from devicehub.store.sqlite.store import SqliteStore
from support.stores import StoreFactory, request, run

PATH = "/3/0/0"


def test_request_queue_keeps_enqueue_order_and_updates(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.enqueue_request(request("b", "d1"))
        await store.enqueue_request(request("a", "d2"))
        await store.enqueue_request(request("c", "d1"))
        assert [r.async_id for r in await store.pending_requests("d1")] == ["b", "c"]
        assert [r.async_id for r in await store.all_pending_requests()] == ["b", "a", "c"]
        assert await store.count_pending_requests() == 3
        updated = DeviceRequest(
            **{**{f: getattr(request("b"), f) for f in DeviceRequest.__struct_fields__}, "retries_left": 3}
        )
        await store.update_request(updated)
        assert await store.find_request("k1", "b") == updated
        assert await store.remove_request("k1", "b")
        assert not await store.remove_request("k1", "b")
        assert [r.async_id for r in await store.all_pending_requests()] == ["a", "c"]
        assert await store.count_pending_requests() == 2

    run(make_store, scenario)


def test_devices_with_pending_requests_names_only_those_with_a_queued_request(make_store: StoreFactory) -> None:
    """Issue 16: a batch of registrations asks once which of its devices have requests waiting (a storm
    re-registers thousands of devices with empty queues); more ids than SQLite takes in one statement."""

    async def scenario(store: Store) -> None:
        await store.enqueue_request(request("a", "d1"))
        await store.enqueue_request(request("b", "d1"))
        await store.enqueue_request(request("c", "d3"))
        many = [f"x{n}" for n in range(1200)]
        assert await store.devices_with_pending_requests(["d1", "d2", *many, "d3", "d1"]) == {"d1", "d3"}
        assert await store.devices_with_pending_requests([]) == set()
        assert await store.remove_request("k1", "c")
        assert await store.devices_with_pending_requests(["d1", "d3"]) == {"d1"}

    run(make_store, scenario)


def test_enqueue_refuses_a_pending_async_id_and_a_full_queue_in_the_step_that_queues(make_store: StoreFactory) -> None:
    """Issue 15: the duplicate and queue-length checks are the store's, in one step with the insert, so concurrent
    submits of one async-id queue it once and the others get DuplicateAsyncId (not a storage error)."""

    async def scenario(store: Store) -> None:
        outcomes = await asyncio.gather(
            *(store.enqueue_request(request("same"), 3) for _ in range(5)), return_exceptions=True
        )
        assert outcomes.count(None) == 1
        assert all(isinstance(o, DuplicateAsyncId) for o in outcomes if o is not None)
        await store.enqueue_request(request("same", key="k2"), 3)  # the async-id is per key
        await store.enqueue_request(request("two"), 3)
        with pytest.raises(QueueFull):
            await store.enqueue_request(request("three"), 3)
        await store.enqueue_request(request("elsewhere", "d2"), 3)  # the bound is per device
        await store.enqueue_request(request("unbounded"))
        assert [r.async_id for r in await store.pending_requests("d1")] == ["same", "same", "two", "unbounded"]
        assert await store.remove_request("k1", "same")
        await store.enqueue_request(request("same"), 4)  # no longer pending: accepted again
        assert [r.async_id for r in await store.all_pending_requests()][-1] == "same"

    run(make_store, scenario)


def pending_desired(payload: bytes = b"on") -> DesiredValue:
    return DesiredValue(value=payload, desired_at=5.0, status=0, status_updated_at=5.0, request_id="k1/w")


def test_a_queued_write_stores_its_pending_desired_value_with_it(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.enqueue_request(request("w"), 3, (PATH, pending_desired()))
        assert [r.async_id for r in await store.pending_requests("d1")] == ["w"]
        assert await store.get_desired("d1", PATH) == pending_desired()
        assert [r.path for r in await store.get_snapshot("d1")] == [PATH]

    run(make_store, scenario)


def test_a_refused_enqueue_stores_no_desired_value(make_store: StoreFactory) -> None:
    """Issue 29 #4: the desired value is written in the step that queues, so a refused write makes nothing pending."""

    async def scenario(store: Store) -> None:
        await store.enqueue_request(request("w"), 1)
        with pytest.raises(DuplicateAsyncId):
            await store.enqueue_request(request("w"), 0, (PATH, pending_desired()))
        with pytest.raises(QueueFull):
            await store.enqueue_request(request("other"), 1, (PATH, pending_desired()))
        assert await store.get_desired("d1", PATH) is None
        assert await store.get_snapshot("d1") == []

    run(make_store, scenario)


async def _fail_desired_writes(store: Store) -> None:
    """Make the desired value's write fail where it is stored: Redis holds another type at the device's desired-value
    key (WRONGTYPE); SQLite's main file is capped at its size (a real SQLITE_FULL), the queue's own file is not."""
    if is_shared(store):
        assert isinstance(store, RedisStore)
        await store.redis.set(store.keys.dev("snap_des", "d1"), b"not a hash")
        return
    assert isinstance(store, SqliteStore)
    await store.get_snapshot("d1")  # the write-behind is empty: nothing else needs a page
    pages = await store._read(lambda db: int(db.execute("PRAGMA page_count").fetchone()[0]))
    await store._write(lambda db: db.execute(f"PRAGMA max_page_count = {pages}"))


def test_an_enqueue_whose_desired_value_cannot_be_stored_leaves_neither(make_store: StoreFactory) -> None:
    """Issue 29 #4: enqueueing a write and recording its desired value commit together: when the desired value
    cannot be written the caller hears the failure and no request stays queued to be delivered later."""

    async def scenario(store: Store) -> None:
        await _fail_desired_writes(store)
        with pytest.raises((StorageUnavailable, ResponseError)):
            await store.enqueue_request(request("w"), 3, (PATH, pending_desired(b"x" * 200_000)))
        assert await store.pending_requests("d1") == []
        assert await store.find_request("k1", "w") is None
        assert await store.count_pending_requests() == 0

    run(make_store, scenario)
