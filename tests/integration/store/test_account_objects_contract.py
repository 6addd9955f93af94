"""The Store contract for account-owned LwM2M object definitions, on SQLite and on a real Redis."""

from __future__ import annotations

from devicehub.domain.object_model import AccountObject, ObjectDefinition, ResourceDefinition
from devicehub.domain.storage.store import Store
from support.stores import StoreFactory, run

A = "a" * 32
B = "b" * 32


def stored(object_id: int, account: str = A, name: str = "Thing") -> AccountObject:
    resource = ResourceDefinition(id=1, name="Level", operations="RW", type="float", units="%")
    definition = ObjectDefinition(id=object_id, name=name, multiple=True, resources=(resource,))
    return AccountObject(account_id=account, definition=definition, created_at=1.0)


def test_definitions_are_kept_per_account_in_id_order_and_survive_a_reopen(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        assert await store.put_account_object(stored(33000), replace=False)
        assert await store.put_account_object(stored(10250), replace=False)
        assert await store.put_account_object(stored(33000, account=B, name="Other"), replace=False)
        assert await store.get_account_object(A, 33000) == stored(33000)
        assert await store.get_account_object(A, 1) is None
        assert [s.definition.id for s in await store.list_account_objects(A)] == [10250, 33000]
        assert [s.definition.name for s in await store.list_account_objects(B)] == ["Other"]

    async def check(store: Store) -> None:
        again = await store.get_account_object(A, 10250)
        assert again is not None and again.definition.resources[0].units == "%"

    run(make_store, scenario)
    run(make_store, check)


def test_an_existing_definition_is_kept_unless_replaced_and_deletes_are_per_account(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        assert await store.put_account_object(stored(33000), replace=False)
        assert not await store.put_account_object(stored(33000, name="Second"), replace=False)
        kept = await store.get_account_object(A, 33000)
        assert kept is not None and kept.definition.name == "Thing"
        assert await store.put_account_object(stored(33000, name="Second"), replace=True)
        replaced = await store.get_account_object(A, 33000)
        assert replaced is not None and replaced.definition.name == "Second"
        assert not await store.delete_account_object(B, 33000)
        assert await store.delete_account_object(A, 33000)
        assert not await store.delete_account_object(A, 33000)
        assert await store.list_account_objects(A) == []

    run(make_store, scenario)
