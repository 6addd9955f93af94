"""Restart safety of the embedded store (issue 5): events queued for an absent WebSocket, and the
subscriptions that produce them, survive a graceful stop (SIGTERM) and are delivered in order after a restart."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import aiohttp
import pytest

from devicehub.clock import SystemClock
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import TEMPERATURE
from support.apps import EventReader
from support.service import ServiceProcess
from support.waiting import eventually

pytestmark = pytest.mark.e2e

VALUES = [10.5, 11.5, 12.5, 13.5, 14.5]


async def _reported(http: aiohttp.ClientSession, headers: dict[str, str], device_id: str) -> str | None:
    """The echo's reported temperature (base64 as the API shows it); the snapshot and the channel are fed
    in the same step, so once the echo shows a value its event is queued."""
    async with http.get(f"/v3/devices/{device_id}/echo", headers=headers) as r:
        assert r.status == 200
        for resource in (await r.json())["resources"]:
            if resource["resource_path"] == "/3303/0/5700" and "reported" in resource:
                return str(resource["reported"]["value"])
    return None


async def _before_stop(service: ServiceProcess) -> None:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    async with aiohttp.ClientSession(service.base_url) as http:
        async with http.put("/v2/notification/websocket", headers=headers) as r:
            assert r.status == 201
        rules = [{"endpoint-name": "restart-1", "resource-path": ["/3303/0/5700"]}]
        async with http.put("/v2/subscriptions", headers=headers, json=rules) as r:
            assert r.status == 202, await r.text()
        sim = SimDevice(SystemClock(), ("127.0.0.1", service.coap_port), "restart-1", flavor=OMA)
        await sim.start()
        try:
            await asyncio.wait_for(sim.registered.wait(), 10)
            # the presubscription makes the server observe the temperature; wait until the device has the observer
            await eventually(lambda: bool(sim.observers.by_token), within=10.0)
            for sent, value in enumerate(VALUES, start=1):
                sim.set_value(TEMPERATURE, value)  # one at a time: a device notifies its current value
                await eventually(lambda sent=sent: sim.counters.notifications == sent, within=10.0)
            last = base64.b64encode(str(VALUES[-1]).encode()).decode()
            await eventually(
                lambda: _reported(http, headers, sim.device_id or ""),
                accept=lambda value: value == last,
                within=10.0,
                what=f"the reported value {last}",
                every=0.02,
            )
        finally:
            await sim.stop(deregister=False)


async def _after_restart(service: ServiceProcess) -> list[float]:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    async with aiohttp.ClientSession(service.base_url) as http:
        ws = await http.ws_connect("/v2/notification/websocket-connect", headers=headers)
        reader = EventReader(ws)
        await reader.wait_for("notifications", lambda e: base64.b64decode(e["payload"]) == b"14.5")
        await reader.wait_for("registrations", lambda e: e["original-ep"] == "restart-1")
        await ws.close()
        return [float(base64.b64decode(e["payload"])) for e in reader.events("notifications")]


def test_queued_events_survive_sigterm_and_are_delivered_after_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = ServiceProcess(data_dir=data_dir).start()
    try:
        asyncio.run(_before_stop(first))
    finally:
        assert first.stop() == 0  # graceful: flushes the journal and the store
    second = ServiceProcess(data_dir=data_dir).start()
    try:
        assert second.api_key == first.api_key  # the dev key is reused from the data directory
        delivered = asyncio.run(_after_restart(second))
    finally:
        second.stop()
    assert delivered[-len(VALUES) :] == VALUES, delivered  # every queued value, in order, none lost
