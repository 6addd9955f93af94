"""The Store contract for bootstrap configurations, on SQLite and on a real Redis (conftest.py `make_store`)."""

from __future__ import annotations

import msgspec

from devicehub.domain.model import BootstrapConfig
from devicehub.domain.storage.store import Store
from support.stores import StoreFactory, run

A = "a" * 32
B = "b" * 32


def config(name: str, account: str = A, uri: str = "coap://10.0.0.1:5683", **fields: object) -> BootstrapConfig:
    base = BootstrapConfig(
        endpoint_name=name, account_id=account, server_uri=uri, security_mode=3, created_at=1.0, updated_at=2.0
    )
    return msgspec.structs.replace(base, **fields)


def test_bootstrap_configs_are_kept_listed_per_account_and_survive_a_reopen(make_store: StoreFactory) -> None:
    psk = config("dev-b", security_mode=0, public_identity=b"id", secret_key=b"\x00\x01\xff", lifetime=300)

    async def scenario(store: Store) -> None:
        assert await store.put_bootstrap_config(config("dev-c"))
        assert await store.put_bootstrap_config(psk)
        assert await store.put_bootstrap_config(config("dev-a"))
        assert await store.put_bootstrap_config(config("other-1", account=B))
        assert await store.get_bootstrap_config("dev-b") == psk
        assert await store.get_bootstrap_config("nobody") is None
        assert [c.endpoint_name for c in await store.list_bootstrap_configs(A)] == ["dev-a", "dev-b", "dev-c"]
        assert [c.endpoint_name for c in await store.list_bootstrap_configs(A, after="dev-a", limit=1)] == ["dev-b"]
        assert [c.endpoint_name for c in await store.list_bootstrap_configs(B)] == ["other-1"]
        replaced = msgspec.structs.replace(psk, server_uri="coap://10.0.0.2:5683", updated_at=3.0)
        assert await store.put_bootstrap_config(replaced)
        assert await store.get_bootstrap_config("dev-b") == replaced

    async def check(store: Store) -> None:
        stored = await store.get_bootstrap_config("dev-b")
        assert (
            stored is not None and stored.server_uri == "coap://10.0.0.2:5683" and stored.secret_key == b"\x00\x01\xff"
        )
        assert len(await store.list_bootstrap_configs(A)) == 3

    run(make_store, scenario)
    run(make_store, check)


def test_an_endpoint_name_of_another_account_cannot_be_configured_or_deleted(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        assert await store.put_bootstrap_config(config("taken", account=A))
        assert not await store.put_bootstrap_config(config("taken", account=B, uri="coap://evil:5683"))
        stored = await store.get_bootstrap_config("taken")
        assert stored is not None and stored.account_id == A and stored.server_uri == "coap://10.0.0.1:5683"
        assert await store.list_bootstrap_configs(B) == []
        await store.enroll(A, "enrolled-in-a")
        assert not await store.put_bootstrap_config(config("enrolled-in-a", account=B))
        assert await store.put_bootstrap_config(config("enrolled-in-a", account=A))
        assert not await store.delete_bootstrap_config(B, "taken")
        assert await store.get_bootstrap_config("taken") is not None
        assert await store.delete_bootstrap_config(A, "taken")
        assert not await store.delete_bootstrap_config(A, "taken")
        assert await store.get_bootstrap_config("taken") is None
        assert [c.endpoint_name for c in await store.list_bootstrap_configs(A)] == ["enrolled-in-a"]
        assert await store.put_bootstrap_config(config("taken", account=B))  # free again once deleted

    run(make_store, scenario)
