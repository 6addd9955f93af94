"""The console's feed in Redis mode (issue 32 #2): a feed served by node A shows the registrations, notifications
and de-registrations of a device held by node B, and the answer B gave to a request the feed's key made through A
(not to another key's feed) — two nodes in this process on one real Redis (and on a Redis Cluster). B relays the
account's events only while some node has a feed of the account open."""

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
            other = (await a.accounts.create_key(account, "other"))[1]  # another key of the account: its own feed
            async with aiohttp.ClientSession(f"http://127.0.0.1:{a.http_port}", headers=headers) as http:
                async with (
                    http.ws_connect("/v3/console/feed") as ws,
                    http.ws_connect("/v3/console/feed", headers={"Authorization": f"Bearer {other}"}) as other_ws,
                ):
                    feed, other_feed = Feed(ws), Feed(other_ws)
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
                        # a request with the feed's key through A is answered by B (the holder): the feed shows it
                        body = {"method": "GET", "uri": "/3/0/0"}
                        async with http.post(f"/v2/device-requests/{device_id}?async-id=via-a", json=body) as r:
                            assert r.status == 202, await r.text()
                        answered = await feed.wait_for("async-response", lambda e: e["id"] == "via-a")
                        assert answered["status"] == 200
                    await feed.wait_for("de-registration", lambda e: e["device_id"] == device_id)
                    await other_feed.wait_for("de-registration", lambda e: e["device_id"] == device_id)
                    assert not [e for e in other_feed.seen if e["kind"] == "async-response"]  # the asking key's only
                    assert len([e for e in feed.seen if e["kind"] == "registration"]) == 1  # not twice
            # the last feed closed: the claim is withdrawn and B stops relaying
            await eventually(lambda: account not in relay(b).open_accounts)

    run(scenario(), timeout=60)
