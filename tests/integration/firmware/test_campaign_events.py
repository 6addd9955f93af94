"""Campaign and device changes as events (issue 33 #2): a channel whose serialization opted in
(`cfg.include_firmware_updates`) gets a `firmware-updates` array (each phase of the campaign, each device's state with
its reason), on both stores (Redis mode forwards events to the channel's owner); a channel that did not, as a Pelion
client's, gets none of it; the console's feed shows them as lines."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from test_campaign_rollout import fleet, prepare, read_until

from devicehub.sim.firmware import FirmwareFaults
from support.apps import EventReader
from support.node import run, running_node

OPT_IN = {"serialization": {"cfg": {"include_firmware_updates": True}}}


async def _feed_lines(ws: aiohttp.ClientWebSocketResponse, want: int) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    async with asyncio.timeout(10):
        while len([e for e in lines if e["kind"] == "firmware-update"]) < want:
            message = await ws.receive()
            assert message.type == aiohttp.WSMsgType.TEXT, message
            lines.extend(json.loads(message.data))
    return [e for e in lines if e["kind"] == "firmware-update"]


def test_campaign_and_device_changes_reach_the_channels_that_opted_in_and_the_console(
    tmp_path: Path, store_url: str
) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=store_url, firmware_check_interval=0.05) as node:
            account, _ = await node.accounts.ensure_dev_account(node.dev_api_key)
            _, plain_key = await node.accounts.create_key(account.id, "pelion-client", admin=True)
            base = f"http://127.0.0.1:{node.http_port}"
            dev, plain = ({"Authorization": f"Bearer {k}"} for k in (node.dev_api_key, plain_key))
            async with (
                aiohttp.ClientSession(base, headers=dev) as http,
                aiohttp.ClientSession(base, headers=plain) as other,
            ):
                async with http.put("/v2/notification/websocket", json=OPT_IN) as r:
                    assert r.status == 201 and (await r.json())["serialization"]["cfg"]["include_firmware_updates"]
                async with other.put("/v2/notification/websocket") as r:
                    assert r.status == 201
                opted = EventReader(await http.ws_connect("/v2/notification/websocket-connect"))
                pelion = EventReader(await other.ws_connect("/v2/notification/websocket-connect"))
                console = await http.ws_connect("/v3/console/feed")
                faults = {"fw-ok": FirmwareFaults(), "fw-bad": FirmwareFaults(corrupt=True)}
                async with fleet(node, faults) as devices:
                    ids = {name: sim.device_id for name, sim in devices.items()}
                    campaign_id = await prepare(http)
                    await read_until(http, f"/v3/update-campaigns/{campaign_id}", lambda c: c["phase"] == "stopped")
                    await opted.wait_for("firmware-updates", lambda e: e["phase"] == "stopped" and "ep" not in e)
                    lines = await _feed_lines(console, 7)  # 3 phases, 2 states of 2 devices
                    # the Pelion client's channel: the devices' registrations, and nothing of the campaign
                    await pelion.wait_for("registrations", lambda e: e["ep"] == ids["fw-bad"])
                await pelion.wait_for("de-registrations", lambda e: True)
                await console.close()
        updates = opted.events("firmware-updates")
        assert all(u["campaign"] == campaign_id for u in updates)
        phases = [u["phase"] for u in updates if "ep" not in u]
        assert phases == ["starting", "active", "stopped"], updates
        states = {(u["original-ep"], u["deployment_state"]) for u in updates if "ep" in u}
        assert states == {
            ("fw-ok", "updated_connector_channel"),
            ("fw-ok", "deployed"),
            ("fw-bad", "updated_connector_channel"),
            ("fw-bad", "failed_connector_channel_update"),
        }, updates
        failed = next(u for u in updates if u.get("deployment_state") == "failed_connector_channel_update")
        assert failed["ep"] == ids["fw-bad"] and failed["reason"].startswith("Update Result 5: integrity check")
        assert pelion.events("firmware-updates") == [] and not any("firmware-updates" in m for m in pelion.messages)
        # the console's feed: the same changes as lines
        assert [(e["phase"], e.get("state")) for e in lines if "device_id" not in e] == [
            ("starting", None),
            ("active", None),
            ("stopped", None),
        ]
        assert {(e["ep"], e["state"]) for e in lines if "device_id" in e} == states

    run(scenario(), timeout=60)
