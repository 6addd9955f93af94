"""The console's live feed (issue 32 #2): a key reads its account's events on a WebSocket of the console's own,
without any notification channel, so logging in to the console never changes an application's channel."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from support.node import device, run, running_node

TEMPERATURE = "/3303/0/5700"


class Feed:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self.seen: list[dict[str, Any]] = []

    async def wait_for(self, kind: str, match: Any = lambda e: True, within: float = 10.0) -> dict[str, Any]:
        async with asyncio.timeout(within):
            while True:
                for event in self.seen:
                    if event["kind"] == kind and match(event):
                        return event
                message = await self._ws.receive()
                assert message.type == aiohttp.WSMsgType.TEXT, message
                self.seen.extend(json.loads(message.data))


def test_the_feed_carries_the_accounts_events_typed_values_and_the_keys_answers_without_a_channel(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.ws_connect("/v3/console/feed") as ws:
                    feed = Feed(ws)
                    async with device(node, "feed-1", flavor="oma") as sim:
                        device_id = sim.device_id or ""
                        registered = await feed.wait_for("registration")
                        assert registered["device_id"] == device_id and registered["ep"] == "feed-1"

                        async with http.put(f"/v2/subscriptions/{device_id}{TEMPERATURE}") as r:
                            assert r.status in (200, 202)
                        sim.set_value(TEMPERATURE, 33.5)
                        notified = await feed.wait_for(
                            "notification", lambda e: any(v["value"] == "33.5" for v in e["values"])
                        )
                        assert notified["path"] == TEMPERATURE and notified["device_id"] == device_id

                        # an instance read in TLV: each value typed by the object model
                        body = {"method": "GET", "uri": "/3303/0", "accept": "application/vnd.oma.lwm2m+tlv"}
                        async with http.post(f"/v2/device-requests/{device_id}?async-id=c-1", json=body) as r:
                            assert r.status == 202
                        answer = await feed.wait_for("async-response", lambda e: e["id"] == "c-1")
                        assert answer["status"] == 200
                    await feed.wait_for("de-registration", lambda e: e["device_id"] == device_id)
                # the key never got a channel
                async with http.get("/v2/notification/channel") as r:
                    assert r.status == 404

    run(scenario())


def test_the_feed_closes_on_a_bad_key_and_a_plain_get_is_426(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as http:
            async with http.ws_connect("/v3/console/feed", protocols=("wss", "pelion_ak_wrong")) as ws:
                message = await ws.receive()
                assert message.type == aiohttp.WSMsgType.CLOSE and ws.close_code == 1008
            async with http.get("/v3/console/feed") as r:
                assert r.status == 426
            # the console's way: the key as a sub-protocol beside `wss`
            async with http.ws_connect("/v3/console/feed", protocols=("wss", f"pelion_{node.dev_api_key}")) as ws:
                assert ws.protocol == "wss"
                async with device(node, "feed-2"):
                    message = await ws.receive()
                    assert json.loads(message.data)[0]["kind"] == "registration"

    run(scenario())
