"""Waves (issue 33 #3, opt-in): a campaign with `waves` starts its devices in rising shares, each wave only when every
device of the waves before finished, and a failing image halts in its first wave: the devices of later waves are
never started."""

from __future__ import annotations

import itertools
from pathlib import Path

import aiohttp
from test_campaign_rollout import fleet, prepare, read_until

from devicehub.node import Node
from devicehub.sim.firmware import FirmwareFaults
from support.node import run, running_node


def test_each_wave_starts_when_the_one_before_finished(tmp_path: Path) -> None:
    async def scenario() -> None:
        faults = {f"wave-{n}": FirmwareFaults() for n in range(5)}
        async with running_node(tmp_path, firmware_check_interval=0.05) as node, fleet(node, faults):
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                campaign_id = await prepare(http, waves=[20, 60, 100])  # 1 device, then 3 in all, then 5
                path = f"/v3/update-campaigns/{campaign_id}"
                campaign = await read_until(http, path, lambda c: c["phase"] == "stopped")
                assert campaign["waves"] == [20, 60, 100] and campaign["state"] == "deployed", campaign
            devices = await node.store.list_campaign_devices(await _account(node), campaign_id)
        assert {d.deployment_state for d in devices} == {"deployed"}
        ordered = sorted(devices, key=lambda d: d.started_at or 0.0)
        waves = [ordered[:1], ordered[1:3], ordered[3:]]
        for before, after in itertools.pairwise(waves):
            last_finished = max(d.finished_at or 0.0 for d in before)
            assert all((d.started_at or 0.0) >= last_finished for d in after), (before, after)

    run(scenario(), timeout=60)


def test_a_failing_image_halts_in_its_first_wave(tmp_path: Path) -> None:
    async def scenario() -> None:
        faults = {f"bad-{n}": FirmwareFaults(corrupt=True) for n in range(10)}
        async with running_node(tmp_path, firmware_check_interval=0.05) as node, fleet(node, faults):
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                fields = {"waves": [20, 100], "halt_failure_percent": 10, "halt_min_finished": 2}
                campaign_id = await prepare(http, **fields)
                path = f"/v3/update-campaigns/{campaign_id}"
                campaign = await read_until(http, path, lambda c: c["phase"] == "stopped")
                async with http.get(f"{path}/statistics") as r:
                    counts = {s["id"]: s["count"] for s in (await r.json())["data"]}
                body = {"device_filter": "endpoint_type=fw-test", "waves": [50, 10]}
                async with http.post("/v3/update-campaigns", json=body) as r:
                    refused = r.status, await r.json()
            devices = await node.store.list_campaign_devices(await _account(node), campaign_id)
        assert campaign["autostop_reason"].startswith("halted: 2 of 2 finished devices failed"), campaign
        assert counts == {"success": 0, "fail": 2, "info": 0, "skipped": 8}, counts
        assert sum(1 for d in devices if d.started_at is not None) == 2  # the second wave never started
        assert refused[0] == 400 and "waves" in refused[1]["message"], refused

    run(scenario(), timeout=60)


async def _account(node: Node) -> str:
    account, _ = await node.accounts.ensure_dev_account(node.dev_api_key)
    return account.id
