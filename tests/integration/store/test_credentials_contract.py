"""Device credentials (issue 13 #3) on both stores: shared keys by endpoint name, trusted CAs per account."""

from __future__ import annotations

from test_store_contract import A, B, StoreFactory, reopen, run

from devicehub.store.base import Store
from devicehub.store.records import DeviceSharedKey, TrustedCa


def psk(name: str, account: str = A) -> DeviceSharedKey:
    return DeviceSharedKey(
        endpoint_name=name, account_id=account, sealed_secret=b"sealed-" + name.encode(), created_at=1.0
    )


def ca(ca_id: str, account: str = A) -> TrustedCa:
    return TrustedCa(id=ca_id, account_id=account, name=ca_id, pem="PEM", subject="CN=x", not_after=9.0, created_at=1.0)


def test_shared_keys_are_unique_by_endpoint_name_paginated_per_account_and_deletable(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        for name in ("dev-c", "dev-a", "dev-b"):
            assert await store.create_shared_key(psk(name))
        assert not await store.create_shared_key(psk("dev-a", B))  # one name, one key, whatever the account
        assert await store.create_shared_key(psk("dev-z", B))
        got = await store.get_shared_key("dev-a")
        assert got is not None and got.account_id == A and got.sealed_secret == b"sealed-dev-a"
        assert [k.endpoint_name for k in await store.list_shared_keys(A, limit=2)] == ["dev-a", "dev-b"]
        assert [k.endpoint_name for k in await store.list_shared_keys(A, after="dev-b")] == ["dev-c"]
        assert [k.endpoint_name for k in await store.list_shared_keys(None)] == ["dev-a", "dev-b", "dev-c", "dev-z"]
        assert await store.delete_shared_key("dev-b")
        assert not await store.delete_shared_key("dev-b")

    async def check(store: Store) -> None:
        assert await store.get_shared_key("dev-b") is None
        assert [k.endpoint_name for k in await store.list_shared_keys(A)] == ["dev-a", "dev-c"]

    run(make_store, scenario)
    reopen(make_store, check)


def test_trusted_cas_are_listed_per_account_and_removable(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_trusted_ca(ca("c1"))
        await store.put_trusted_ca(ca("c2", B))
        assert [c.id for c in await store.list_trusted_cas()] == ["c1", "c2"]
        assert [c.id for c in await store.list_trusted_cas(B)] == ["c2"]
        assert await store.delete_trusted_ca("c1")
        assert not await store.delete_trusted_ca("c1")

    async def check(store: Store) -> None:
        assert [c.id for c in await store.list_trusted_cas()] == ["c2"]
        assert await store.list_trusted_cas(A) == []

    run(make_store, scenario)
    reopen(make_store, check)
