"""Named leases on both stores."""

from __future__ import annotations

from devicehub.domain.storage.store import Store
from support.stores import StoreFactory, run


def test_leases_are_exclusive_until_expiry_and_released_only_by_their_owner(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        assert await store.acquire_lease("sweep", "node-a", 10, now=100.0)
        assert await store.acquire_lease("sweep", "node-a", 10, now=105.0)  # renew
        assert not await store.acquire_lease("sweep", "node-b", 10, now=114.0)
        await store.release_lease("sweep", "node-b")  # not the owner: no effect
        assert not await store.acquire_lease("sweep", "node-b", 10, now=114.0)
        assert await store.acquire_lease("sweep", "node-b", 10, now=115.0)  # node-a's lease ran out
        await store.release_lease("sweep", "node-b")
        assert await store.acquire_lease("sweep", "node-a", 10, now=116.0)

    run(make_store, scenario)
