"""Last contact (issue 32 #2): Register, Update, a notification and a response each move a device's
`last_contact_at` in the directory (not `updated_at`, which stays the registration's); the directory sorts by it; the
store is written once per interval for a whole batch, never per notification."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from devicehub.clock import ManualClock
from devicehub.domain.contacts import WRITE_S
from devicehub.domain.timefmt import rfc3339
from devicehub.node import Node
from support.apps import websocket_app as app
from support.node import device, run, running_node
from support.waiting import eventually

TEMPERATURE = "/3303/0/5700"


async def directory(http: aiohttp.ClientSession, query: str = "") -> list[dict[str, Any]]:
    async with http.get(f"/v3/devices?{query}") as r:
        assert r.status == 200, await r.text()
        data: list[dict[str, Any]] = (await r.json())["data"]
        return data


async def contact_of(http: aiohttp.ClientSession, device_id: str) -> str:
    async with http.get(f"/v3/devices/{device_id}") as r:
        return str((await r.json())["last_contact_at"])


async def until_contact(http: aiohttp.ClientSession, device_id: str, expected: str) -> None:
    await eventually(
        lambda: contact_of(http, device_id),
        accept=lambda contact: contact == expected,
        within=5.0,
        what=f"last_contact_at {expected}",
        every=0.01,
    )


async def stored_as(node: Node, account: str, expected: dict[str, float]) -> bool:
    return await node.store.get_contacts(account, list(expected)) == expected


def test_notifications_and_responses_move_the_last_contact_and_the_directory_sorts_by_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        start = clock.now()
        async with (
            running_node(tmp_path, clock=clock) as node,
            device(node, "seen-a", flavor="oma") as first,
            device(node, "seen-b", flavor="oma") as second,
            app(node) as (http, _),
        ):
            a, b = first.device_id or "", second.device_id or ""
            listed = {d["endpoint_name"]: d for d in await directory(http)}
            assert listed["seen-a"]["last_contact_at"] == rfc3339(start)  # the Register

            # a notification, 100 s later: the contact moves, the registration's updated_at does not
            async with http.put(f"/v2/subscriptions/{a}{TEMPERATURE}") as r:
                assert r.status in (200, 202)
            await clock.advance(100)
            first.set_value(TEMPERATURE, 30.5)
            await until_contact(http, a, rfc3339(start + 100))
            async with http.get(f"/v3/devices/{a}") as r:
                assert (await r.json())["updated_at"] == rfc3339(start)

            # a response, 50 s after that, from the other device
            await clock.advance(50)
            async with http.post(f"/v2/device-requests/{b}?async-id=r1", json={"method": "GET", "uri": "/3/0/0"}) as r:
                assert r.status == 202
            # (the key's WebSocket has been closed by the moved clock's ping time-out: the answer is seen here)
            await until_contact(http, b, rfc3339(start + 150))

            by_contact = await directory(http, "sort=last_contact_at&order=DESC")
            assert [d["endpoint_name"] for d in by_contact] == ["seen-b", "seen-a"]
            first_page = await directory(http, "sort=last_contact_at&limit=2")
            assert [d["endpoint_name"] for d in first_page] == ["seen-a", "seen-b"]
            assert [d["id"] for d in await directory(http, f"sort=last_contact_at&after={a}")] == [b]
            async with http.get("/v3/devices?sort=name") as r:
                assert r.status == 400

            # the store is written by the interval's batch (woken by the clock at start + 30, 60 … 120), never per
            # message: the response at start + 150 is not stored until the next one
            assert WRITE_S == 30
            account = listed["seen-a"]["account_id"]
            # (the woken write goes to the store's writer thread: its result is polled for, with a deadline)
            await eventually(lambda: stored_as(node, account, {a: start + 100, b: start}))
            await clock.advance(30)
            await eventually(lambda: stored_as(node, account, {a: start + 100, b: start + 150}))

    run(scenario())
