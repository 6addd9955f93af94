"""A campaign over simulated devices with object 5 on an in-process node (issue 33 #2-#4): pull over the built-in CoAP
file server, Update executed when Downloaded, success after the device comes back with the new version; failures
named by their Update Result; a download interrupted by a reboot resumes at its offset."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from devicehub.clock import SystemClock
from devicehub.config import ServeSettings
from devicehub.lwm2m.security import ClientCredentials
from devicehub.node import Node
from devicehub.sim.device import SimDevice
from devicehub.sim.firmware import FirmwareFaults, SimFirmware
from support.node import run, running_node
from support.ports import free_udp_port
from support.waiting import eventually

FIXTURES = Path(__file__).parents[2] / "support" / "firmware"
IMAGE = (FIXTURES / "image-1.2.3.bin").read_bytes()
MANIFEST = (FIXTURES / "manifest-1.2.3.bin").read_bytes()


def form(datafile: bytes) -> aiohttp.FormData:
    data = aiohttp.FormData()
    data.add_field("datafile", datafile, filename="f.bin")
    return data


@contextlib.asynccontextmanager
async def fleet(node: Node, faults: dict[str, FirmwareFaults]) -> AsyncIterator[dict[str, SimDevice]]:
    devices = {}
    for name, fault in faults.items():
        sim = SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), name, endpoint_type="fw-test", flavor="oma")
        sim.firmware = SimFirmware(sim, fault)
        devices[name] = sim
    await asyncio.gather(*(d.start() for d in devices.values()))
    try:
        await asyncio.wait_for(asyncio.gather(*(d.registered.wait() for d in devices.values())), 10)
        await node.lwm2m.flush()
        yield devices
    finally:
        await asyncio.gather(*(d.stop() for d in devices.values()))


async def read_until(http: aiohttp.ClientSession, path: str, done: Any, within: float = 20.0) -> Any:
    """GET `path` until its body is `done` (bounded); that body."""

    async def body() -> Any:
        async with http.get(path) as r:
            return await r.json()

    return await eventually(body, accept=done, within=within, what=f"{path} done", every=0.05)


async def prepare(http: aiohttp.ClientSession, **fields: Any) -> str:
    async with http.post("/v3/firmware-images", data=form(IMAGE)) as r:
        assert r.status == 201
    async with http.post("/v3/firmware-manifests", data=form(MANIFEST)) as r:
        manifest = await r.json()
    body = {"device_filter": "endpoint_type=fw-test", "root_manifest_id": manifest["id"], **fields}
    async with http.post("/v3/update-campaigns", json=body) as r:
        assert r.status == 201, await r.text()
        campaign_id: str = (await r.json())["id"]
    async with http.post(f"/v3/update-campaigns/{campaign_id}/start") as r:
        assert r.status == 202
    return campaign_id


def test_devices_are_updated_and_failures_are_named_by_their_update_result(tmp_path: Path, store_url: str) -> None:
    faults = {
        "ok-1": FirmwareFaults(),
        "ok-2": FirmwareFaults(reboot_at=0.5),
        "corrupt": FirmwareFaults(corrupt=True),
        "refuses": FirmwareFaults(refuse=True),
        "odd": FirmwareFaults(result=42),
    }

    async def scenario() -> None:
        settings = {"redis_url": store_url, "firmware_check_interval": 0.05}
        async with running_node(tmp_path, **settings) as node, fleet(node, faults) as devices:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                campaign_id = await prepare(http)
                path = f"/v3/update-campaigns/{campaign_id}"
                campaign = await read_until(http, path, lambda c: c["phase"] == "stopped")
                assert campaign["state"] == "deployed" and campaign["autostop_reason"] == ""
                async with http.get(f"{path}/campaign-device-metadata") as r:
                    states = {d["name"]: d for d in (await r.json())["data"]}
                async with http.get(f"{path}/statistics") as r:
                    counts = {s["id"]: s["count"] for s in (await r.json())["data"]}
        assert {n: d["deployment_state"] for n, d in states.items()} == {
            "ok-1": "deployed",
            "ok-2": "deployed",
            "corrupt": "failed_connector_channel_update",
            "refuses": "failed_connector_channel_update",
            "odd": "failed_connector_channel_update",
        }
        assert (
            states["ok-1"]["firmware_version"] == "1.2.3" and devices["ok-1"].model.resource("/3/0/3").value == "1.2.3"
        )  # type: ignore[union-attr]
        assert "Update Result 5: integrity check failure" in states["corrupt"]["description"]
        assert "Update Result 8: firmware update failed" in states["refuses"]["description"]
        assert (
            "Update Result 42 is not defined" in states["odd"]["description"] and states["odd"]["update_result"] == 42
        )
        assert states["ok-1"]["update_result"] == 1 and states["corrupt"]["update_result"] == 5
        assert counts == {"success": 2, "fail": 3, "info": 0, "skipped": 0}
        resumed = devices["ok-2"].firmware
        assert resumed is not None and resumed.log.reboots == 2  # mid-download, and into the new version
        assert resumed.log.restarts_from_zero == 1 and resumed.log.resumed_at is not None
        assert resumed.log.blocks == len(IMAGE) // 1024  # no block fetched twice
        # counted by the file server: each of the 5 devices started from byte 0 once, and no block went out twice
        assert node.files.stats.first_blocks == 5 and node.files.stats.blocks == 5 * len(IMAGE) // 1024

    run(scenario(), timeout=60)


def test_the_halt_rule_stops_a_failing_rollout_in_its_first_wave_and_says_why(tmp_path: Path) -> None:
    faults = {f"bad-{i}": FirmwareFaults(corrupt=True) for i in range(10)}
    faults.update({f"good-{i}": FirmwareFaults() for i in range(2)})

    async def scenario() -> None:
        async with running_node(tmp_path, firmware_check_interval=0.05) as node, fleet(node, faults):
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                # a pace of 5 starts a minute: of the first 5 devices at least 3 are bad, which the rule sees
                rules = {"halt_failure_percent": 30, "halt_min_finished": 3, "max_starts_per_minute": 5}
                campaign_id = await prepare(http, **rules)
                path = f"/v3/update-campaigns/{campaign_id}"
                campaign = await read_until(http, path, lambda c: c["phase"] == "stopped")
                async with http.get(f"{path}/metrics") as r:
                    metrics = await r.json()
                async with http.get(f"{path}/campaign-device-metadata") as r:
                    devices = (await r.json())["data"]
        assert campaign["state"] == "autostopped" and campaign["autostop_reason"].startswith("halted: "), campaign
        assert metrics["total_count"] == 12 and metrics["failed_count"] >= 3
        assert metrics["skipped_count"] == 7  # never started: the campaign stopped within its first 5 starts
        skipped = [d for d in devices if d["step"] == "skipped"]
        assert len(skipped) == 7 and all("the campaign stopped (halted: " in d["description"] for d in skipped)

    run(scenario(), timeout=60)


def test_a_node_restart_during_a_campaign_loses_no_device_state(tmp_path: Path) -> None:
    faults = {f"slow-{i}": FirmwareFaults(apply_s=1.5) for i in range(6)}  # installing outlasts the restart
    settings = ServeSettings(
        host="127.0.0.1",
        http_port=0,
        coap_port=free_udp_port(),
        coaps_port=0,
        data_dir=tmp_path,
        dev=True,
        allow_nosec=True,
        firmware_check_interval=0.05,
    )

    async def scenario() -> None:
        node = Node(settings)
        await node.start()
        restarted = Node(settings)
        try:
            async with fleet(node, faults) as devices:
                headers = {"Authorization": f"Bearer {node.dev_api_key}"}
                async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                    campaign_id = await prepare(http)
                    path = f"/v3/update-campaigns/{campaign_id}/campaign-device-metadata"
                    await read_until(http, path, lambda page: {d["step"] for d in page["data"]} == {"updating"})
                await node.stop()  # every device is installing: Update executed, its result not read yet
                await restarted.start()
                headers = {"Authorization": f"Bearer {restarted.dev_api_key}"}
                async with aiohttp.ClientSession(f"http://127.0.0.1:{restarted.http_port}", headers=headers) as http:
                    await read_until(http, f"/v3/update-campaigns/{campaign_id}", lambda c: c["phase"] == "stopped")
                    async with http.get(path) as r:
                        states = {d["name"]: d["deployment_state"] for d in (await r.json())["data"]}
        finally:
            await restarted.stop()
        assert states == dict.fromkeys(faults, "deployed")
        for device in devices.values():  # the restarted engine went on from each device's stored step
            assert len([w for w in device.log.writes if w[0] == "/5/0/1"]) == 1

    run(scenario(), timeout=60)


def test_push_delivers_the_package_in_one_block1_write(tmp_path: Path) -> None:
    faults = {"push-1": FirmwareFaults(), "push-2": FirmwareFaults(), "push-bad": FirmwareFaults(corrupt=True)}

    async def scenario() -> None:
        async with running_node(tmp_path, firmware_check_interval=0.05) as node, fleet(node, faults) as devices:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                campaign_id = await prepare(http, delivery="push")
                path = f"/v3/update-campaigns/{campaign_id}"
                await read_until(http, path, lambda c: c["phase"] == "stopped")
                async with http.get(f"{path}/campaign-device-metadata") as r:
                    states = {d["name"]: d["deployment_state"] for d in (await r.json())["data"]}
        assert states == {
            "push-1": "deployed",
            "push-2": "deployed",
            "push-bad": "failed_connector_channel_update",
        }
        assert node.files.stats.blocks == 0  # nothing pulled from the file server
        for device in devices.values():  # the whole package in one Write (sent in Block1 blocks, reassembled)
            assert [(t, v) for t, v in device.log.writes if t.startswith("/5/")] == [("/5/0/0", IMAGE)]

    run(scenario(), timeout=60)


def test_a_device_silent_past_its_deadline_counts_as_failed(tmp_path: Path) -> None:
    faults = {"stuck": FirmwareFaults(apply_s=60.0), "quick": FirmwareFaults()}  # "stuck" never finishes installing

    async def scenario() -> None:
        async with running_node(tmp_path, firmware_check_interval=0.05) as node, fleet(node, faults):
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                campaign_id = await prepare(http, device_deadline_seconds=2)
                path = f"/v3/update-campaigns/{campaign_id}"
                await read_until(http, path, lambda c: c["phase"] == "stopped")
                async with http.get(f"{path}/campaign-device-metadata") as r:
                    states = {d["name"]: d for d in (await r.json())["data"]}
        assert states["quick"]["deployment_state"] == "deployed"
        assert states["stuck"]["deployment_state"] == "failed_connector_channel_update"
        assert states["stuck"]["description"] == "no result within the device deadline of 2 s"

    run(scenario(), timeout=60)


def test_a_stopped_campaign_lets_installing_devices_finish_and_skips_the_rest(tmp_path: Path) -> None:
    faults = {f"dev-{i}": FirmwareFaults(apply_s=1.0) for i in range(4)}

    async def scenario() -> None:
        async with running_node(tmp_path, firmware_check_interval=0.05) as node, fleet(node, faults):
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                campaign_id = await prepare(http, max_starts_per_minute=2)
                path = f"/v3/update-campaigns/{campaign_id}"
                steps = f"{path}/campaign-device-metadata"
                await read_until(http, steps, lambda p: sorted(d["step"] for d in p["data"])[-2:] == ["updating"] * 2)
                async with http.post(f"{path}/stop") as r:
                    assert r.status == 202 and (await r.json())["phase"] == "stopping"
                async with http.post(f"{path}/stop") as r:
                    assert r.status == 409  # stopping already
                campaign = await read_until(http, path, lambda c: c["phase"] == "stopped")
                async with http.get(steps) as r:
                    states = sorted((d["deployment_state"], d["step"]) for d in (await r.json())["data"])
                async with http.post(f"{path}/archive") as r:
                    assert r.status == 200 and (await r.json())["phase"] == "archived"
        assert campaign["state"] == "userstopped" and campaign["autostop_reason"] == "stopped by the user"
        assert states == [("deployed", "done")] * 2 + [("pending", "skipped")] * 2

    run(scenario(), timeout=60)


def test_a_device_on_dtls_downloads_over_coaps_with_its_own_credentials(tmp_path: Path) -> None:
    key = bytes(range(16))
    name = "dtls-firmware-device-0001"

    async def scenario() -> None:
        settings: dict[str, Any] = {"coaps_port": free_udp_port(), "firmware_check_interval": 0.05}
        async with running_node(tmp_path, dev=False, allow_nosec=False, **settings) as node:
            assert node.coaps_port is not None
            account = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(account, name, key.hex())
            _, api_key = await node.accounts.create_key(account, "fw", admin=True)
            sim = SimDevice(
                SystemClock(), ("127.0.0.1", node.coaps_port), name, endpoint_type="fw-test", flavor="oma",
                security=ClientCredentials(psk_identity=name, psk_key=key),
            )  # fmt: skip
            sim.firmware = SimFirmware(sim)
            await sim.start()
            try:
                await asyncio.wait_for(sim.registered.wait(), 10)
                await node.lwm2m.flush()
                headers = {"Authorization": f"Bearer {api_key}"}
                async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                    campaign_id = await prepare(http)
                    path = f"/v3/update-campaigns/{campaign_id}"
                    await read_until(http, path, lambda c: c["phase"] == "stopped")
                    async with http.get(f"{path}/campaign-device-metadata") as r:
                        states = [d["deployment_state"] for d in (await r.json())["data"]]
            finally:
                await sim.stop()
        assert states == ["deployed"]
        uri = next(str(v) for t, v in sim.log.writes if t == "/5/0/1")
        assert uri.startswith(f"coaps://127.0.0.1:{node.coaps_port}/fw/{account}/"), uri
        assert node.files.stats.blocks == len(IMAGE) // 1024  # every block over the device's DTLS session

    run(scenario(), timeout=60)
