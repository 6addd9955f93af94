"""The whole path on real sockets: a simulated device registers over UDP, an application subscribes over
HTTP, and the value arrives on the application's WebSocket — and only on the subscribing key's channel."""

from __future__ import annotations

import asyncio
import base64

import aiohttp
import pytest

from support.apps import EventReader, create_key, simulator, stop
from support.service import ServiceProcess

pytestmark = pytest.mark.e2e


async def _scenario(service: ServiceProcess, other_key: str) -> None:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    other = {"Authorization": f"Bearer {other_key}"}
    async with aiohttp.ClientSession(service.base_url) as http:
        async with http.put("/v2/notification/websocket", headers=headers) as r:
            assert r.status == 201
        async with http.put("/v2/notification/websocket", headers=other) as r:
            assert r.status == 201
        ws = await http.ws_connect("/v2/notification/websocket-connect", protocols=("wss", f"pelion_{service.api_key}"))
        reader = EventReader(ws)
        device = simulator(service.coap_uri, "--count", "1", "--prefix", "e2e-", "--rate", "5", "--flavor", "oma")
        try:
            registration = await reader.wait_for("registrations", lambda e: e["original-ep"] == "e2e-0")
            device_id = registration["ep"]
            assert len(device_id) == 32

            async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700", headers=headers) as r:
                assert r.status == 202
                async_id = (await r.json())["async-response-id"]
            confirmation = await reader.wait_for("async-responses", lambda e: e["id"] == async_id)
            assert confirmation["status"] == 200
            first = await reader.wait_for("notifications", lambda e: e["path"] == "/3303/0/5700")
            assert first["ep"] == device_id
            float(base64.b64decode(first["payload"]).decode())
            # the value changes on the device: a further notification arrives
            await reader.wait_for("notifications", lambda e: e["path"] == "/3303/0/5700" and e is not first)

            async with http.get(f"/v3/devices/{device_id}/echo", headers=headers) as r:
                echo = await r.json()
            resource = next(x for x in echo["resources"] if x["resource_path"] == "/3303/0/5700")
            assert resource["subscribed"] is True and "reported" in resource

            # the other key of the same account sees the lifecycle event but no notification
            async with http.get("/v2/notification/websocket", headers=other) as r:
                assert r.status == 200
            other_ws = await http.ws_connect("/v2/notification/websocket-connect", headers=other)
            other_reader = EventReader(other_ws)
            await other_reader.wait_for("registrations", lambda e: e["ep"] == device_id)
            assert other_reader.events("notifications") == []
            await other_ws.close()
            await ws.close()
        finally:
            stop(device)


def test_value_reaches_only_the_subscribing_keys_websocket(service: ServiceProcess) -> None:
    other_key = create_key(str(service.data_dir))
    asyncio.run(_scenario(service, other_key))
