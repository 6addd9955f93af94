"""The console's feed in Redis mode (issue 32 #2): a feed served by node A shows the registrations, notifications
and de-registrations of a device held by node B — two nodes in this process on one real Redis (and on a Redis
Cluster). B relays the account's events only while some node has a feed of the account open."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from test_console_feed import TEMPERATURE, Feed

from devicehub.channels.console_relay import ConsoleRelay
from devicehub.node import Node
from support.apps import websocket_app
from support.node import device, run, running_node
from support.waiting import eventually

pytestmark = pytest.mark.redis


def relay(node: Node) -> ConsoleRelay:
    assert node.feed.relay is not None
    return node.feed.relay


def test_a_feed_on_one_node_shows_the_devices_another_node_holds(tmp_path: Path, shared_redis_url: str) -> None:
    async def scenario() -> None:
        url = shared_redis_url
        async with (
            running_node(tmp_path / "a", redis_url=url, node_id="feed-a") as a,
            running_node(tmp_path / "b", redis_url=url, node_id="feed-b") as b,
        ):
            account = (await a.accounts.authenticate(a.dev_api_key)).account_id
            assert relay(b).open_accounts == frozenset()  # no console open anywhere: B publishes nothing
            headers = {"Authorization": f"Bearer {a.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{a.http_port}", headers=headers) as http:
                async with http.ws_connect("/v3/console/feed") as ws:
                    feed = Feed(ws)
                    await eventually(lambda: account in relay(b).open_accounts)  # within CHECK_S
                    async with device(b, "far-1", flavor="oma") as sim, websocket_app(b) as (app, _):
                        device_id = sim.device_id or ""
                        assert a.lwm2m.registration(device_id) is None  # B holds it
                        registered = await feed.wait_for("registration", lambda e: e["ep"] == "far-1")
                        assert registered["device_id"] == device_id
                        async with app.put(f"/v2/subscriptions/{device_id}{TEMPERATURE}") as r:
                            assert r.status in (200, 202)
                        sim.set_value(TEMPERATURE, 36.5)
                        notified = await feed.wait_for(
                            "notification", lambda e: any(v["value"] == "36.5" for v in e["values"])
                        )
                        assert notified["device_id"] == device_id and notified["path"] == TEMPERATURE
                    await feed.wait_for("de-registration", lambda e: e["device_id"] == device_id)
                    assert len([e for e in feed.seen if e["kind"] == "registration"]) == 1  # not twice
            # the last feed closed: the claim is withdrawn and B stops relaying
            await eventually(lambda: account not in relay(b).open_accounts)

    run(scenario(), timeout=60)
