"""Store contract tests: one store opened, used by a scenario and closed (a second call reopens what the first
wrote), on whichever backend the `make_store` fixture gives (tests/integration/store/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from devicehub.domain.storage.store import Store

StoreFactory = Callable[[], Store]


def run(make_store: StoreFactory, scenario: Callable[[Store], Awaitable[None]]) -> None:
    async def main() -> None:
        store = make_store()
        await store.open()
        try:
            await scenario(store)
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def minting(device_id: str) -> Callable[[], str]:
    """A store's `mint` for a new endpoint name's id that makes `device_id`."""
    return lambda: device_id
