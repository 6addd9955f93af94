"""Device credentials (issue 13 #3) on both stores: shared keys by endpoint name, trusted CAs per account."""

from __future__ import annotations

import asyncio

from test_bootstrap_config_contract import config

from devicehub.domain.model import DeviceSharedKey, TrustedCa
from devicehub.domain.storage.store import Store
from support.stores import A, B, StoreFactory, reopen, run


def psk(name: str, account: str = A) -> DeviceSharedKey:
    return DeviceSharedKey(
        endpoint_name=name, account_id=account, sealed_secret=b"sealed-" + name.encode(), created_at=1.0
    )


def ca(ca_id: str, account: str = A) -> TrustedCa:
    return TrustedCa(id=ca_id, account_id=account, name=ca_id, pem="PEM", subject="CN=x", not_after=9.0, created_at=1.0)


def test_shared_keys_are_unique_by_endpoint_name_paginated_per_account_and_deletable(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        for name in ("dev-c", "dev-a", "dev-b"):
            assert await store.create_shared_key(psk(name)) == "created"
        assert await store.create_shared_key(psk("dev-a")) == "exists"
        assert await store.create_shared_key(psk("dev-a", B)) == "taken"  # one name, one key, whatever the account
        assert await store.create_shared_key(psk("dev-z", B)) == "created"
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


def test_a_shared_key_enrols_its_name_and_is_refused_for_a_name_of_another_account(make_store: StoreFactory) -> None:
    # issue 28 #1: a credential for a name enrolled into (or configured for bootstrap by) another account is refused
    async def scenario(store: Store) -> None:
        await store.enroll(A, "enrolled-in-a")
        assert await store.create_shared_key(psk("enrolled-in-a", B)) == "taken"
        assert await store.get_shared_key("enrolled-in-a") is None  # nothing written
        assert await store.enrolled_account("enrolled-in-a") == A
        assert await store.create_shared_key(psk("enrolled-in-a")) == "created"  # its own account may
        assert await store.put_bootstrap_config(config("configured-by-a", A))
        assert await store.create_shared_key(psk("configured-by-a", B)) == "taken"
        assert await store.create_shared_key(psk("fresh-name", B)) == "created"
        assert await store.enrolled_account("fresh-name") == B  # the key enrolled its name
        assert await store.delete_shared_key("fresh-name")
        assert await store.enrolled_account("fresh-name") == B  # the name stays the account's
        assert await store.create_shared_key(psk("fresh-name", A)) == "taken"

    async def check(store: Store) -> None:
        assert await store.enrolled_account("fresh-name") == B
        assert await store.create_shared_key(psk("fresh-name", A)) == "taken"

    run(make_store, scenario)
    reopen(make_store, check)


def test_an_authenticated_endpoint_is_admitted_only_into_the_account_its_name_belongs_to(
    make_store: StoreFactory,
) -> None:
    # issue 28 #1: a device whose credential is another account's than its name's enrolment is refused; the first
    # authenticated Register of a name enrolled nowhere enrols it, so no other account can claim it afterwards
    ids = iter(f"{i:032x}" for i in range(1, 100))

    async def scenario(store: Store) -> None:
        await store.enroll(A, "owned-by-a")
        assert await store.admit_authenticated(B, "owned-by-a", lambda: next(ids)) is None
        first = await store.admit_authenticated(A, "owned-by-a", lambda: next(ids))
        assert first is not None
        assert await store.admit_authenticated(A, "owned-by-a", lambda: next(ids)) == first  # one name, one id
        claimed = await store.admit_authenticated(B, "unenrolled", lambda: next(ids))
        assert claimed is not None and await store.enrolled_account("unenrolled") == B
        assert await store.admit_authenticated(A, "unenrolled", lambda: next(ids)) is None
        assert await store.create_shared_key(psk("unenrolled", A)) == "taken"
        racing = await asyncio.gather(*(store.admit_authenticated(acct, "raced", lambda: next(ids)) for acct in (A, B)))
        assert sorted(r is None for r in racing) == [False, True]  # exactly one account wins the name

    async def check(store: Store) -> None:
        assert await store.enrolled_account("unenrolled") == B
        assert await store.admit_authenticated(A, "unenrolled", lambda: next(ids)) is None

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
