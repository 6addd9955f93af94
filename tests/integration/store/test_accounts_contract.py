"""API accounts and their keys on both stores."""

from __future__ import annotations

from devicehub.domain.model import (
    Account,
    ApiKey,
)
from devicehub.domain.storage.store import Store
from support.stores import A, B, StoreFactory, run


def test_accounts_and_keys(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.create_account(Account(id=A, name="zeta", created_at=1.0))
        await store.create_account(Account(id=B, name="alpha", tier="free", created_at=2.0))
        assert [a.name for a in await store.list_accounts()] == ["alpha", "zeta"]
        assert (await store.find_account_by_name("alpha")) == Account(id=B, name="alpha", tier="free", created_at=2.0)
        assert await store.get_account("c" * 32) is None
        key = ApiKey(id="k1", account_id=A, name="app", key_hash="h1", created_at=5.0)
        await store.create_key(key)
        await store.create_key(ApiKey(id="k0", account_id=A, name="old", key_hash="h0", created_at=4.0))
        assert [k.id for k in await store.list_keys(A)] == ["k0", "k1"]
        assert await store.find_key_by_hash("h1") == key
        assert await store.revoke_key("k1", 7.0)
        assert not await store.revoke_key("nope", 7.0)
        revoked = await store.find_key_by_hash("h1")
        assert revoked is not None and revoked.revoked_at == 7.0

    run(make_store, scenario)
