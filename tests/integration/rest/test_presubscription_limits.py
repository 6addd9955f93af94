"""Presubscription rules are bounded per key (issue 14.7): a key cannot make every registration expensive."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from support.node import run, running_node


def test_rules_beyond_the_path_bound_are_refused_and_change_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                at_bound = [{"endpoint-name": "n-*", "resource-path": [f"/3303/{i}/5700" for i in range(4096)]}]
                async with http.put("/v2/subscriptions", json=at_bound) as r:
                    assert r.status == 202
                split = [
                    {"resource-path": [f"/{n}/{i}" for i in range(2049)]} for n in (3303, 3304)
                ]  # 4098 paths over two rules
                async with http.put("/v2/subscriptions", json=split) as r:
                    assert (r.status, await r.text()) == (400, "LIMITS_EXCEEDED")
                async with http.get("/v2/subscriptions") as r:
                    assert await r.json() == at_bound

    run(scenario())
