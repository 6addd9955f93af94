"""The Store contract for saved device directory filters (issue 32 #3), on SQLite, a real Redis and a Redis Cluster:
a name is unique within its account, an account keeps at most MAX_PER_ACCOUNT, a rename frees the old name."""

from __future__ import annotations

import msgspec

from devicehub.domain.saved_queries import MAX_PER_ACCOUNT, Saved, SavedQuery
from devicehub.domain.storage.store import Store
from support.stores import StoreFactory, run

A = "a" * 32
B = "b" * 32


def _query(n: int, name: str, account_id: str = A) -> SavedQuery:
    return SavedQuery(
        id=f"{n:032x}", account_id=account_id, name=name, query="state=registered", created_at=1.0, updated_at=1.0
    )


def test_names_are_unique_per_account_and_renames_free_them(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        assert await store.put_saved_query(_query(1, "sensors"), create=True) is Saved.DONE
        assert await store.put_saved_query(_query(2, "sensors"), create=True) is Saved.NAME_TAKEN
        assert await store.put_saved_query(_query(1, "again"), create=True) is Saved.NAME_TAKEN  # the id is taken
        assert await store.put_saved_query(_query(3, "sensors", B), create=True) is Saved.DONE  # another account
        assert await store.put_saved_query(_query(4, "gone"), create=False) is Saved.MISSING
        renamed = msgspec.structs.replace(_query(1, "boilers"), query="endpoint_type=boiler", updated_at=2.0)
        assert await store.put_saved_query(renamed, create=False) is Saved.DONE
        assert await store.put_saved_query(_query(2, "sensors"), create=True) is Saved.DONE  # the old name is free
        assert await store.get_saved_query(A, f"{1:032x}") == renamed
        assert await store.get_saved_query(B, f"{1:032x}") is None
        assert [q.name for q in await store.list_saved_queries(A)] == ["boilers", "sensors"]
        assert await store.delete_saved_query(A, f"{2:032x}")
        assert not await store.delete_saved_query(A, f"{2:032x}")
        assert await store.put_saved_query(_query(5, "sensors"), create=True) is Saved.DONE  # freed by the delete
        assert [q.name for q in await store.list_saved_queries(B)] == ["sensors"]

    async def check(store: Store) -> None:
        assert [q.id for q in await store.list_saved_queries(A)] == [f"{1:032x}", f"{5:032x}"]

    run(make_store, scenario)
    run(make_store, check)


def test_an_account_keeps_at_most_its_share(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        for n in range(MAX_PER_ACCOUNT):
            assert await store.put_saved_query(_query(n, f"q{n}"), create=True) is Saved.DONE
        assert await store.put_saved_query(_query(MAX_PER_ACCOUNT, "one more"), create=True) is Saved.FULL
        assert await store.put_saved_query(_query(7, "renamed"), create=False) is Saved.DONE  # an update still goes
        assert await store.put_saved_query(_query(1, "other", B), create=True) is Saved.DONE

    run(make_store, scenario)
