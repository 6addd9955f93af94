"""Writes from concurrent REST calls share store transactions (issue 15): every call still gets its own answer,
none is lost, and what was answered 202 is stored (a restarted node, on either store, still has it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from support.node import device, run, running_node


def test_concurrent_subscriptions_are_all_stored_and_unknown_devices_fail_alone(tmp_path: Path, store_url: str) -> None:
    """Three devices, every resource of each subscribed at once from concurrent calls, with calls for unknown
    devices (404) and device requests (202) mixed in; after a restart every subscription is listed."""

    async def scenario() -> None:
        wanted: dict[str, set[str]] = {}
        async with running_node(tmp_path, redis_url=store_url) as node:
            base = f"http://127.0.0.1:{node.http_port}"
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with (
                device(node, "batch-1") as one,
                device(node, "batch-2") as two,
                device(node, "batch-3") as three,
                aiohttp.ClientSession(headers=headers) as http,
            ):
                for sim in (one, two, three):
                    stored = await node.store.get_device(sim.device_id or "")
                    assert stored is not None
                    wanted[stored.id] = {r.path for r in stored.resources if r.path.count("/") == 3}

                async def call(method: str, path: str) -> tuple[str, int]:
                    async with http.request(method, base + path, json={"method": "GET", "uri": "/3/0/0"}) as r:
                        return path, r.status

                calls = [call("PUT", f"/v2/subscriptions/{d}{p}") for d, paths in wanted.items() for p in paths]
                calls += [call("PUT", f"/v2/subscriptions/nope-{i}/3/0/0") for i in range(5)]
                calls += [call("POST", f"/v2/device-requests/{d}?async-id=r-{i}") for i, d in enumerate(wanted)]
                calls += [call("POST", f"/v2/device-requests/nope-{i}?async-id=x-{i}") for i in range(3)]
                answers = await asyncio.gather(*calls)
                assert len(answers) > 30
                for path, status in answers:
                    assert status == (404 if "/nope-" in path else 202), (path, status)
        async with (
            running_node(tmp_path, redis_url=store_url) as node,
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {node.dev_api_key}"}) as http,
        ):
            listed: dict[str, set[str]] = {}
            for device_id in wanted:
                async with http.get(f"http://127.0.0.1:{node.http_port}/v2/subscriptions/{device_id}") as r:
                    assert r.status == 200, await r.text()
                    listed[device_id] = set((await r.text()).splitlines())
        assert listed == wanted

    run(scenario())
