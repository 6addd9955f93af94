"""The device-request queue on both stores: order, look-ups, and the de-dup and bound checked in the queueing step."""

from __future__ import annotations

import asyncio

import pytest

from devicehub.domain.model import (
    DeviceRequest,
)
from devicehub.domain.storage.store import Store
from devicehub.errors import DuplicateAsyncId, QueueFull
from support.stores import StoreFactory, request, run


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
