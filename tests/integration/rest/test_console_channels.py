"""The console's node page's channels (issue 32 #2, `GET /v3/console/channels`), on both stores: an administrator
key sees every channel of its account with its state (queue, oldest event's age), another key only its own, and
no key another account's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from support.node import device, run, running_node
from support.waiting import eventually


def test_the_accounts_channels_with_their_oldest_event(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=store_url) as node:
            account = (await node.accounts.authenticate(node.dev_api_key)).account_id
            admin = (await node.accounts.create_key(account, "ops", admin=True))[1]
            app_key, app = await node.accounts.create_key(account, "app")
            other = (await node.accounts.create_account("elsewhere")).id
            _, stranger = await node.accounts.create_key(other, "x", admin=True)
            base = f"http://127.0.0.1:{node.http_port}"

            async def call(key: str, method: str, path: str) -> tuple[int, Any]:
                headers = {"Authorization": f"Bearer {key}"}
                async with aiohttp.ClientSession(base, headers=headers) as http, http.request(method, path) as r:
                    return r.status, await r.json() if r.status < 400 else None

            for key in (admin, app, stranger):  # a WebSocket channel each, never connected: its events wait
                assert (await call(key, "PUT", "/v2/notification/websocket"))[0] in (200, 201)
            async with device(node, "chan-1"):
                pass  # a registration and a de-registration for the account's channels

            async def listed(key: str) -> list[dict[str, Any]]:
                status, body = await call(key, "GET", "/v3/console/channels")
                assert status == 200 and body["object"] == "list"
                return list(body["data"])

            # the registration and the de-registration reach the app's queue after the device call returns (in
            # Redis mode through the key's inbox to the channel's owner): the two reads below compare a settled queue
            own = await eventually(
                lambda: call(app, "GET", "/v2/notification/channel?include=status"),
                accept=lambda answer: answer[1]["status"]["queue_size"] == 2,
                what="the registration and the de-registration queued for the app",
            )
            every = await listed(admin)
            assert sorted(c["key_name"] for c in every) == ["app", "ops"]
            [mine] = await listed(app)
            assert (mine["key_id"], mine["kind"]) == (app_key.id, "websocket")
            assert mine["status"]["queue_size"] == own[1]["status"]["queue_size"]
            assert mine["status"]["oldest_age_s"] >= own[1]["status"]["oldest_age_s"] > 0  # read after it: older
            assert [c["key_name"] for c in await listed(stranger)] == ["x"]
            assert (await call("ak_nope", "GET", "/v3/console/channels"))[0] == 401

    run(scenario(), timeout=60)
