"""The Store contract for per-account usage counters (issue 32 #3, `GET /v3/metrics`), on SQLite, a real Redis and a
Redis Cluster: counts add up (several flushes, several nodes), are read by hour range, and accounts are apart."""

from __future__ import annotations

from devicehub.domain.storage.store import Store
from support.stores import StoreFactory, run

A = "a" * 32
B = "b" * 32
H = 1_800_000_000 // 3600 * 3600  # an hour's start


def test_counts_add_up_and_are_read_by_hour(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.add_usage([(A, H, "full_registrations", 3), (A, H + 3600, "full_registrations", 1)])
        await store.add_usage([(A, H, "full_registrations", 2), (A, H, "connect_rest_api_error", 1)])
        await store.add_usage([(B, H, "full_registrations", 7), (A, H + 86_400, "registration_updates", 4)])
        assert await store.get_usage(A, H, H + 7200) == {
            H: {"full_registrations": 5, "connect_rest_api_error": 1},
            H + 3600: {"full_registrations": 1},
        }
        assert await store.get_usage(A, H + 3600, H + 90_000) == {
            H + 3600: {"full_registrations": 1},
            H + 86_400: {"registration_updates": 4},
        }
        assert await store.get_usage(B, H - 86_400, H + 86_400) == {H: {"full_registrations": 7}}
        assert await store.get_usage(A, H, H) == {}
        await store.sweep_usage(H + 3600)
        assert (await store.get_usage(A, H, H + 90_000)).get(H + 86_400) == {"registration_updates": 4}

    async def check(store: Store) -> None:  # written through: a reopened store has them
        assert (await store.get_usage(A, H + 3600, H + 7200)) == {H + 3600: {"full_registrations": 1}}

    run(make_store, scenario)
    run(make_store, check)


def test_a_gauge_sample_replaces_the_stored_one(make_store: StoreFactory) -> None:
    """registered_devices is a sample, not a count: the hour keeps the last one, counts beside it still add up."""

    async def scenario(store: Store) -> None:
        await store.set_usage([(A, H, "registered_devices", 5), (B, H, "registered_devices", 1)])
        await store.set_usage([(A, H, "registered_devices", 3)])
        await store.add_usage([(A, H, "transactions", 2)])
        await store.add_usage([(A, H, "transactions", 2)])
        assert await store.get_usage(A, H, H + 3600) == {H: {"registered_devices": 3, "transactions": 4}}
        assert await store.get_usage(B, H, H + 3600) == {H: {"registered_devices": 1}}

    run(make_store, scenario)
