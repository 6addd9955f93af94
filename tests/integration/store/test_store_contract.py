"""The whole store on both backends: what survives a reopen, and a burst of calls of every kind."""

from __future__ import annotations

import asyncio

from devicehub.domain.model import (
    ReportedValue,
    StoredEvent,
)
from devicehub.domain.storage.store import Store
from support.stores import A, StoreFactory, device, reopen, request, run


def test_data_survives_close_and_reopen(make_store: StoreFactory) -> None:
    async def write(store: Store) -> None:
        await store.put_device(device("d1", "ep1"))
        await store.set_reported("d1", "/3/0/0", ReportedValue(value=b"x", content_type="text/plain", reported_at=1))
        await store.append_events("k1", [StoredEvent(0, b"{}", 1)])
        await store.enqueue_request(request("b"), 20)
        await store.enqueue_request(request("a"), 20)

    async def check(store: Store) -> None:
        assert await store.get_device("d1") is not None
        (resource,) = await store.get_snapshot("d1")
        assert resource.reported is not None
        assert await store.load_events("k1") == [StoredEvent(0, b"{}", 1)]
        assert [r.async_id for r in await store.pending_requests("d1")] == ["b", "a"]

    run(make_store, write)
    reopen(make_store, check)


def test_a_burst_of_concurrent_calls_is_served_not_refused(make_store: StoreFactory) -> None:
    """A registration storm or a busy API makes hundreds of store calls at once: each waits its turn for a
    connection (Redis: a bounded pool) and none fails for want of one."""

    async def scenario(store: Store) -> None:
        devices = [device(f"burst-{i:03d}", f"ep-burst-{i}") for i in range(400)]
        await asyncio.gather(*(store.put_device(d) for d in devices))
        found = await asyncio.gather(*(store.get_device(d.id) for d in devices))
        assert found == devices
        await store.put_registered_devices(devices)
        assert await store.count_devices(A) == 400

    run(make_store, scenario)
