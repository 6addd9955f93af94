"""The Store contract for last contact times (issue 32 #2), on SQLite and on a real Redis."""

from __future__ import annotations

import random

from devicehub.domain.contacts import WRITE_BATCH
from devicehub.domain.storage.store import Store
from support.stores import StoreFactory, run

A = "a" * 32
B = "b" * 32


def test_the_later_contact_time_wins_per_device_and_accounts_are_apart(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_contacts([(A, "d1", 100.5), (A, "d2", 200.0), (B, "d3", 300.0)])
        await store.put_contacts([(A, "d1", 50.0), (A, "d2", 250.25)])  # d1's earlier time does not move it back
        assert await store.get_contacts(A, ["d1", "d2", "d3", "none"]) == {"d1": 100.5, "d2": 250.25}
        assert await store.get_contacts(B, ["d3"]) == {"d3": 300.0}
        assert await store.get_contacts(A, []) == {}

    async def check(store: Store) -> None:
        assert await store.get_contacts(A, ["d1", "d2"]) == {"d1": 100.5, "d2": 250.25}
        await store.delete_contacts(A, ["d1"])
        assert await store.get_contacts(A, ["d1", "d2"]) == {"d2": 250.25}

    run(make_store, scenario)
    run(make_store, check)


def test_a_batch_larger_than_one_statements_parameters_is_read_whole(make_store: StoreFactory) -> None:
    ids = [f"dev-{n:04d}" for n in range(1300)]

    async def scenario(store: Store) -> None:
        await store.put_contacts([(A, d, float(n)) for n, d in enumerate(ids)])
        found = await store.get_contacts(A, ids)
        assert len(found) == 1300 and found["dev-1299"] == 1299.0

    run(make_store, scenario)


def test_no_contact_time_goes_back_in_a_fleet_sized_batch_in_any_order(make_store: StoreFactory) -> None:
    """A write whose time is earlier than the stored one, in a batch of the size ContactBook writes in the order a fleet
    talked, and the same device twice in one batch (its later time first): every stored time stays the latest."""
    rng = random.Random(30)
    ids = [f"{n:012x}{rng.getrandbits(80):020x}" for n in range(WRITE_BATCH)]
    latest = {d: 1_800_000_000.0 + rng.random() * 1000 for d in ids}

    async def scenario(store: Store) -> None:
        await store.put_contacts([(A, d, t) for d, t in latest.items()])
        older = [(A, d, t - rng.choice((1e-6, 0.5, 30.0))) for d, t in latest.items()]
        rng.shuffle(older)
        twice = [(A, ids[0], latest[ids[0]] + 5.0), (A, ids[0], latest[ids[0]] + 1.0)]  # later first, then earlier
        latest[ids[0]] += 5.0
        await store.put_contacts(twice + older[: WRITE_BATCH - 2])
        await store.put_contacts(older[WRITE_BATCH - 2 :])
        assert await store.get_contacts(A, ids) == latest

    run(make_store, scenario)
