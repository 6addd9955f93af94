"""issue 34 in Redis mode on a real Redis: per-device order for 200 devices whose events come in through two nodes
(each a channel hub and the notification API, in one process); a resume with a cursor on another node after the
owner node, a `devicehub serve` process, is killed with SIGKILL; a signing secret rotated through a node that does
not own the callback channel."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import random
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
import msgspec
import pytest
from aiohttp import WSMsgType, web
from channel_harness import note, payloads, port_of, run

from devicehub.api.app import add_routes
from devicehub.api.context import SERVICES, Services
from devicehub.api.errors import error_middleware
from devicehub.api.routes import ROUTES
from devicehub.channels.cluster import ClusterLink
from devicehub.channels.hub import ChannelHub
from devicehub.clock import SystemClock
from devicehub.config import ServeSettings
from devicehub.domain.accounts import AccountService
from devicehub.store.redis.store import RedisStore
from support.redis_server import redis_server
from support.service import ServiceProcess
from support.waiting import eventually

pytestmark = pytest.mark.redis

_prefixes = itertools.count()
CURSORS = {"serialization": {"cfg": {"include_cursor": True}}}


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@dataclass
class Node:
    store: RedisStore
    hub: ChannelHub
    runner: web.AppRunner
    base: str

    def ws_url(self, cursor: int | None = None) -> str:
        url = self.base.replace("http://", "ws://") + "/v2/notification/websocket-connect"
        return url if cursor is None else f"{url}?cursor={cursor}"

    async def stop(self) -> None:
        await self.runner.cleanup()
        await self.hub.stop()
        await self.store.close()


@contextlib.asynccontextmanager
async def node(redis_url: str, prefix: str, name: str, tmp_path: Path, callback_allow: str = "") -> AsyncIterator[Node]:
    store = RedisStore(redis_url, prefix=prefix)
    await store.open()
    settings = ServeSettings(data_dir=tmp_path / name, flush_interval_ms=20, callback_allow=callback_allow)
    clock = SystemClock()
    hub = ChannelHub(
        store,
        clock,
        settings,
        sweep_interval=10_000_000.0,
        ping_interval=10_000_000.0,
        websocket_coalesce=0.0,
        cluster=ClusterLink(store.redis, store.shard, store.prefix, name),
    )
    await hub.start()
    app = web.Application(middlewares=[error_middleware])
    app[SERVICES] = Services(
        settings=settings,
        clock=clock,
        store=store,
        accounts=AccountService(store, clock),
        hub=hub,
        devices=cast(Any, None),
    )
    add_routes(app, tuple(r for r in ROUTES if r.path.startswith("/v2/notification/")))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    running = Node(store, hub, runner, f"http://127.0.0.1:{port_of(runner)}")
    try:
        yield running
    finally:
        await running.stop()


async def frames(ws: aiohttp.ClientWebSocketResponse, count: int) -> list[dict[str, Any]]:
    """Notifications from frames until `count` came; each frame's top-level cursor is its last event's."""
    seen: list[dict[str, Any]] = []
    while len(seen) < count:
        message = await ws.receive(timeout=20)
        assert message.type is WSMsgType.TEXT, message
        body = msgspec.json.decode(str(message.data).encode())
        assert body["cursor"] == body["notifications"][-1]["cursor"]
        seen += body["notifications"]
    return seen


def values(events: list[dict[str, Any]]) -> list[int]:
    return payloads(msgspec.json.encode({"notifications": events}))


def test_per_device_order_holds_for_200_devices_sending_through_two_nodes(redis_url: str, tmp_path: Path) -> None:
    devices = [f"{i:032x}" for i in range(200)]  # 100 send through node A, 100 through node B

    async def main() -> None:
        prefix = f"cur{next(_prefixes)}:"
        async with (
            node(redis_url, prefix, "node-a", tmp_path) as a,
            node(redis_url, prefix, "node-b", tmp_path) as b,
            aiohttp.ClientSession() as http,
        ):
            accounts = AccountService(a.store, SystemClock())
            account = await accounts.create_account("acme", tier="commercial")
            _, secret = await accounts.create_key(account.id)
            key_id = (await accounts.authenticate(secret)).key_id
            async with http.put(
                a.base + "/v2/notification/websocket", json=CURSORS, headers={"Authorization": f"Bearer {secret}"}
            ) as r:
                assert r.status == 201
            ws = await http.ws_connect(a.ws_url(), protocols=("wss", f"pelion_{secret}"))
            await eventually(lambda: (c := a.hub.channel(key_id)) is not None and c.session is not None, within=10.0)
            await eventually(lambda: b.hub.routes(key_id), within=10.0)

            async def device(index: int, d: str) -> None:
                hub = a.hub if index % 2 else b.hub
                for n in range(5):
                    await asyncio.sleep(random.random() / 500)
                    await hub.publish([key_id], note(n, device=d))

            await asyncio.gather(*(device(i, d) for i, d in enumerate(devices)))
            received = await frames(ws, 1000)
            assert [e["cursor"] for e in received] == list(range(1, 1001))
            per_device: dict[str, list[tuple[int, int]]] = {}
            for e, value in zip(received, values(received), strict=True):
                per_device.setdefault(e["ep"], []).append((e["device_seq"], value))
            assert len(per_device) == 200
            assert all(seen == [(n + 1, n) for n in range(5)] for seen in per_device.values())
            await ws.close()

    run(main(), timeout=60)


def test_a_resume_on_another_node_after_the_owner_is_killed_gets_each_missed_event_once(
    redis_url: str, tmp_path: Path
) -> None:
    """The WebSocket's owner is a `devicehub serve` process, killed with SIGKILL after the application has read
    500 events (it processed 300); events keep coming through node B; a connect to B with cursor=300 gets 301…
    each once, in order, those that came after the kill included."""
    devices = [f"{i:032x}" for i in range(50)]
    prefix = "devicehub:"  # the process's default prefix; this test's Redis is its own
    with redis_server() as url:
        owner = ServiceProcess(data_dir=tmp_path / "a", extra_args=("--redis-url", url, "--node-id", "node-a"))
        owner.start()
        try:

            async def main() -> None:
                async with node(url, prefix, "node-b", tmp_path) as b, aiohttp.ClientSession() as http:
                    secret = owner.api_key
                    key_id = (await AccountService(b.store, SystemClock()).authenticate(secret)).key_id
                    async with http.put(
                        owner.base_url + "/v2/notification/websocket",
                        json=CURSORS,
                        headers={"Authorization": f"Bearer {secret}"},
                    ) as r:
                        assert r.status == 201
                    ws_url = owner.base_url.replace("http://", "ws://") + "/v2/notification/websocket-connect"
                    ws = await http.ws_connect(ws_url, protocols=("wss", f"pelion_{secret}"))
                    await eventually(lambda: b.hub.routes(key_id), within=10.0)

                    async def device(d: str, first: int, count: int) -> None:
                        for n in range(first, first + count):
                            await b.hub.publish([key_id], note(n, device=d))

                    await asyncio.gather(*(device(d, 0, 10) for d in devices))
                    received = await frames(ws, 500)
                    assert [e["cursor"] for e in received] == list(range(1, 501))
                    owner.stop(signal.SIGKILL)
                    await ws.close()
                    await asyncio.gather(*(device(d, 10, 2) for d in devices[:15]))

                    # node B adopts the channel once the dead owner's lease runs out (cluster.py LEASE_TTL)
                    await eventually(lambda: b.hub.channel(key_id) is not None, within=20.0)
                    ws = await http.ws_connect(b.ws_url(cursor=300), protocols=("wss", f"pelion_{secret}"))
                    again = await frames(ws, 230)
                    assert [e["cursor"] for e in again] == list(range(301, 531))
                    assert again[:200] == received[300:]  # the very events, bytes for bytes
                    after: dict[str, list[int]] = {}
                    for e in again[200:]:
                        after.setdefault(e["ep"], []).append(e["device_seq"])
                    assert after == {d: [11, 12] for d in devices[:15]}
                    await ws.close()

            run(main(), timeout=60)
        finally:
            owner.stop()


def test_a_secret_rotated_through_another_node_signs_the_owners_deliveries(redis_url: str, tmp_path: Path) -> None:
    """issue 34 #3 in Redis mode: the callback channel is owned by node A; the rotation is asked of node B; the
    owner's next delivery carries both secrets' signatures (checked with the standardwebhooks package)."""
    from channel_harness import LOOPBACK, Receiver
    from standardwebhooks.webhooks import Webhook

    old = "whsec_" + base64.b64encode(os.urandom(32)).decode()

    async def main() -> None:
        prefix = f"sig{next(_prefixes)}:"
        async with (
            Receiver() as receiver,
            node(redis_url, prefix, "node-a", tmp_path, callback_allow=LOOPBACK) as a,
            node(redis_url, prefix, "node-b", tmp_path, callback_allow=LOOPBACK) as b,
            aiohttp.ClientSession() as http,
        ):
            accounts = AccountService(a.store, SystemClock())
            account = await accounts.create_account("acme", tier="commercial")
            _, secret = await accounts.create_key(account.id)
            key_id = (await accounts.authenticate(secret)).key_id
            auth = {"Authorization": f"Bearer {secret}"}
            body = {"url": receiver.url, "secret": old}
            async with http.put(a.base + "/v2/notification/callback", json=body, headers=auth) as r:
                assert r.status == 204, await r.text()
            await receiver.next()
            async with http.post(b.base + "/v2/notification/callback/secret", headers=auth) as r:
                assert r.status == 200, await r.text()
                new = (await r.json())["secret"]

            # the owner hands the channel over to take the new config; whoever owns it next delivers
            def rotated() -> bool:
                return any((c := n.hub.channel(key_id)) is not None and len(c.config.secrets) == 2 for n in (a, b))

            await eventually(rotated, within=20.0)
            await a.hub.publish([key_id], note(1))
            delivery = await receiver.next(within=20.0)
            assert payloads(delivery.body) == [1]
            Webhook(new).verify(delivery.body, delivery.headers)
            Webhook(old).verify(delivery.body, delivery.headers)

    run(main(), timeout=60)


def test_every_channel_get_answers_alike_through_the_node_that_does_not_own_the_channel(
    redis_url: str, tmp_path: Path
) -> None:
    """issue 34 #5 in Redis mode: a WebSocket channel connected to node A; the channel GETs asked of node B (behind a
    load balancer, any node) answer what A's do: the spec's GET of the channel and of its kind, the status, and the
    dead letters, which only the owner holds (B asks A for them)."""

    async def main() -> None:
        prefix = f"view{next(_prefixes)}:"
        async with (
            node(redis_url, prefix, "node-a", tmp_path) as a,
            node(redis_url, prefix, "node-b", tmp_path) as b,
            aiohttp.ClientSession() as http,
        ):
            accounts = AccountService(a.store, SystemClock())
            account = await accounts.create_account("acme", tier="commercial")
            _, secret = await accounts.create_key(account.id)
            key_id = (await accounts.authenticate(secret)).key_id
            auth = {"Authorization": f"Bearer {secret}"}
            async with http.put(a.base + "/v2/notification/websocket", json=CURSORS, headers=auth) as r:
                assert r.status == 201
            ws = await http.ws_connect(a.ws_url(), protocols=("wss", f"pelion_{secret}"))
            await eventually(lambda: (c := a.hub.channel(key_id)) is not None and c.session is not None)
            assert b.hub.channel(key_id) is None  # B does not own it
            for path in (
                "/v2/notification/channel",
                "/v2/notification/websocket",
                "/v2/notification/channel?include=status",
                "/v2/notification/dead-letters",
            ):
                answers = []
                for base in (a.base, b.base):
                    async with http.get(base + path, headers=auth) as r:
                        answers.append((r.status, await r.json()))
                assert answers[0][0] == 200, (path, answers[0])
                assert answers[1] == answers[0], path
            assert answers[0][1] == {"count": 0, "dead_letters": []}
            await ws.close()
            async with http.delete(b.base + "/v2/notification/websocket", headers=auth) as r:
                assert r.status == 204
            for base in (a.base, b.base):  # gone on every node
                await eventually(
                    lambda base=base: _status(http, base + "/v2/notification/channel", auth), accept=lambda s: s == 404
                )

    run(main(), timeout=60)


async def _status(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> int:
    async with http.get(url, headers=headers) as r:
        return r.status
