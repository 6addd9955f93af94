"""Store contract tests: one store opened, used by a scenario and closed (a second call reopens what the first
wrote), on whichever backend the `make_store` fixture gives (tests/integration/store/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from devicehub.domain.model import Device, DeviceRequest
from devicehub.domain.storage.store import Store

StoreFactory = Callable[[], Store]

A = "a" * 32
B = "b" * 32


def reopen(make_store: StoreFactory, check: Callable[[Store], Coroutine[Any, Any, None]]) -> None:
    run(make_store, check)


def device(device_id: str, name: str, *, account: str = A, state: str = "registered", seen: float = 100.0) -> Device:
    return Device(
        id=device_id,
        account_id=account,
        endpoint_name=name,
        state=state,
        created_at=1.0,
        updated_at=2.0,
        last_seen_at=seen,
    )


def request(async_id: str, device_id: str = "d1", key: str = "k1") -> DeviceRequest:
    return DeviceRequest(
        async_id=async_id,
        key_id=key,
        account_id=A,
        device_id=device_id,
        method="GET",
        uri="/3/0/0",
        created_at=1.0,
        expires_at=9.0,
    )


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
