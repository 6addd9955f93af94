"""Enrolment and device-id claims on both stores: one id per (account, endpoint name), whoever asks first."""

from __future__ import annotations

import asyncio

from devicehub.domain.storage.store import Store
from support.stores import A, B, StoreFactory, device, minting, reopen, run


def test_concurrent_claims_of_one_endpoint_name_agree_on_one_device_id(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        claims = await asyncio.gather(
            *(store.claim_device_id(A, f"ep-{i % 3}", minting(f"{i:032x}")) for i in range(60)),
            store.claim_device_id(B, "ep-0", minting("f" * 32)),
        )
        assert len(set(claims[:-1])) == 3 and claims[-1] == "f" * 32  # one id per (account, name)
        assert [claims[i] for i in range(3)] == [claims[i + 3] for i in range(3)]
        await store.put_device(device(claims[0], "ep-0"))
        assert await store.claim_device_id(A, "ep-0", minting("e" * 32)) == claims[0]
        await store.delete_device(claims[0])  # six months unseen: the name may mint a new id
        assert await store.claim_device_id(A, "ep-0", minting("e" * 32)) == "e" * 32

    run(make_store, scenario)


def test_a_claimed_id_stored_with_its_registered_device_survives_a_reopen(make_store: StoreFactory) -> None:
    """issue 16 #1: the embedded store writes a new name's claim with the device's record, not on its own; either
    way the id is one and the same after a restart."""

    async def write(store: Store) -> None:
        (_, claimed) = await store.admit_endpoint("ep-kept", A, minting("c" * 32)) or ("", "")
        assert claimed == "c" * 32
        assert await store.claim_device_id(A, "ep-kept", minting("d" * 32)) == claimed  # reserved: one name, one id
        await store.put_registered_devices([device(claimed, "ep-kept")])

    async def check(store: Store) -> None:
        assert await store.admit_endpoint("ep-kept", A, minting("e" * 32)) == (A, "c" * 32)

    run(make_store, write)
    reopen(make_store, check)


def test_admitting_an_endpoint_takes_its_enrolment_else_the_default_account_and_claims_one_id(
    make_store: StoreFactory,
) -> None:
    async def scenario(store: Store) -> None:
        assert await store.admit_endpoint("stray", None, minting("a" * 32)) is None  # not enrolled, no default: refused
        await store.enroll(B, "enrolled")
        assert await store.admit_endpoint("enrolled", A, minting("b" * 32)) == (B, "b" * 32)  # the enrolment wins
        assert await store.admit_endpoint("enrolled", A, minting("c" * 32)) == (B, "b" * 32)  # one id per name
        assert await store.claim_device_id(B, "enrolled", minting("d" * 32)) == "b" * 32  # the same claim
        assert await store.admit_endpoint("open", A, minting("e" * 32)) == (A, "e" * 32)  # the default account

    run(make_store, scenario)
