"""Start-up steps that create shared state are idempotent when nodes start together (issue 31): two nodes on one
empty store both make the `--dev` account at the same moment and get the same one, with no error, on both stores."""

from __future__ import annotations

import asyncio

from devicehub.clock import SystemClock
from devicehub.domain.accounts import DEV_ACCOUNT_NAME, AccountService
from devicehub.domain.model import Account
from devicehub.domain.storage.store import Store
from support.stores import StoreFactory


def _two_nodes(make_store: StoreFactory) -> tuple[Store, Store]:
    """Two nodes' stores on one database: Redis takes two clients; SQLite serves one node, so both share it."""
    first = make_store()
    return first, (make_store() if first.shared else first)


async def _opened(*stores: Store) -> None:
    for store in dict.fromkeys(stores):
        await store.open()


async def _closed(*stores: Store) -> None:
    for store in dict.fromkeys(stores):
        await store.close()


def test_two_nodes_making_the_dev_account_at_once_share_one_account_and_each_get_a_working_key(
    make_store: StoreFactory,
) -> None:
    async def scenario() -> None:
        one, two = _two_nodes(make_store)
        await _opened(one, two)
        try:
            clock = SystemClock()
            nodes = [AccountService(one, clock), AccountService(two, clock)]
            (account_1, secret_1), (account_2, secret_2) = await asyncio.gather(
                *(node.ensure_dev_account(None) for node in nodes)
            )
            assert account_1 == account_2
            assert [a.name for a in await one.list_accounts()] == [DEV_ACCOUNT_NAME]
            for secret in (secret_1, secret_2):  # each node's own key (shown once) works on either node
                for node in nodes:
                    assert (await node.authenticate(secret)).account_id == account_1.id
        finally:
            await _closed(one, two)

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_ensure_account_run_twice_at_once_creates_one_account(make_store: StoreFactory) -> None:
    async def scenario() -> None:
        one, two = _two_nodes(make_store)
        await _opened(one, two)
        try:
            first = Account(id="a" * 32, name="shared", created_at=1.0)
            second = Account(id="b" * 32, name="shared", created_at=2.0)
            got = await asyncio.gather(one.ensure_account(first), two.ensure_account(second))
            assert got[0] == got[1]
            assert got[0] in (first, second)
            assert await one.list_accounts() == [got[0]]
            assert await two.find_account_by_name("shared") == got[0]
            assert await one.ensure_account(Account(id="c" * 32, name="shared", created_at=3.0)) == got[0]
        finally:
            await _closed(one, two)

    asyncio.run(asyncio.wait_for(scenario(), 20))
