"""Resource subscriptions and presubscriptions on both stores."""

from __future__ import annotations

from devicehub.domain.model import (
    PresubscriptionRule,
)
from devicehub.domain.storage.store import Store
from support.stores import A, B, StoreFactory, device, reopen, run


def test_a_subscription_added_again_after_each_kind_of_removal_is_stored_again(make_store: StoreFactory) -> None:
    """SQLite answers a repeated add of a stored subscription from memory (issue 15): every removal forgets that."""

    async def scenario(store: Store) -> None:
        async def stored() -> list[tuple[str, str]]:
            return await store.subscribers("d1")

        await store.put_device(device("d1", "ep1"))
        for _ in range(2):
            await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]
        assert await store.remove_subscription("k1", "d1", "/3/0/0")
        await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]
        assert await store.remove_device_subscriptions("d1", "k1") == 1
        await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]
        await store.put_registered_devices([device("d1", "ep1")])  # a full registration drops them (spec §2.1)
        assert await stored() == []
        await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]
        await store.delete_device("d1")
        await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]

    run(make_store, scenario)

    async def kept(store: Store) -> None:  # and what was answered from memory is on disk
        assert await store.subscribers("d1") == [("k1", "/3/0/0")]

    reopen(make_store, kept)


def test_subscriptions_are_per_key_idempotent_and_removable(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.add_subscription("k1", "d1", "/3303/0/5700")
        await store.add_subscription("k1", "d1", "/3303/0/5700")
        await store.add_subscription("k1", "d1", "/3/0/0")
        await store.add_subscription("k2", "d1", "/3/0/0")
        assert await store.list_subscriptions("k1", "d1") == ["/3/0/0", "/3303/0/5700"]
        assert await store.subscribers("d1") == [("k1", "/3/0/0"), ("k1", "/3303/0/5700"), ("k2", "/3/0/0")]
        assert await store.remove_subscription("k1", "d1", "/3/0/0")
        assert not await store.remove_subscription("k1", "d1", "/3/0/0")
        assert await store.remove_device_subscriptions("d1", "k2") == 1
        assert await store.remove_device_subscriptions("d1") == 1
        assert await store.subscribers("d1") == []

    run(make_store, scenario)


def test_presubscriptions_replace_clear_and_list_per_account(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        rules = [PresubscriptionRule(endpoint_name="node-*", resource_path=("/3303/0/5700",))]
        await store.set_presubscriptions("k1", A, rules)
        await store.set_presubscriptions("k2", A, [PresubscriptionRule(endpoint_type="sensor")])
        await store.set_presubscriptions("k3", B, rules)
        assert await store.get_presubscriptions("k1") == rules
        assert [k for k, _ in await store.account_presubscriptions(A)] == ["k1", "k2"]
        await store.set_presubscriptions("k2", A, [])
        assert await store.get_presubscriptions("k2") == []
        assert await store.account_presubscriptions(A) == [("k1", rules)]

    run(make_store, scenario)
