"""A node killed under load behind the front (issue 31 #4), for bench/cluster_bench.py --node-kill: what the
devices sent and when it was acknowledged, and what each application received on its channel.

The applications: one API key per node with a WebSocket connected straight to that node (so the killed node holds
one; the application reconnects through the front when its socket closes, as a real one would), and one key per node
with a callback channel (the nodes adopt them by lease). Every key subscribes to the fleet's temperature resource
before the devices register, so each device is observed once and its notifications go to every key.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import redis
from aiohttp import web

from devicehub.clock import SystemClock
from devicehub.domain.device_results import DeviceError
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import TEMPERATURE
from support.front import ThreeNodes
from support.waiting import eventually

Sent = dict[float, tuple[float, float | None]]  # value → (sent at, acknowledged at; None: never acknowledged)


class RecordingDevice(SimDevice):
    """A simulated device whose CON notifications are timed: sent at, acknowledged at (this process's clock)."""

    def __init__(self, server: tuple[str, int], name: str, host: str) -> None:
        super().__init__(SystemClock(), server, name, flavor=OMA, lifetime=3600, host=host)
        self.confirmable_notifications = True
        self.sent: Sent = {}

    def _send_notification(
        self, code: int, token: bytes, options: list[tuple[int, bytes]], payload: bytes, confirmable: bool
    ) -> Awaitable[None]:
        return self._timed(super()._send_notification(code, token, options, payload, confirmable), payload)

    async def _timed(self, sending: Awaitable[None], payload: bytes) -> None:
        value, sent_at = float(payload), time.monotonic()
        self.sent[value] = (sent_at, None)
        try:
            await sending
        except DeviceError:
            raise
        self.sent[value] = (sent_at, time.monotonic())


def fleet(server: tuple[str, int], count: int, prefix: str) -> list[RecordingDevice]:
    """`count` devices at 127.0.0.10, 127.0.0.11, … (and on into 127.0.1.x): the front hashes each address."""
    return [
        RecordingDevice(server, f"{prefix}{n}", f"127.0.{(10 + n) // 250}.{(10 + n) % 250 + 1}") for n in range(count)
    ]


@dataclass
class App:
    """One application key and what reached it: values by device, async-responses by id."""

    key: str
    values: dict[str, set[float]] = field(default_factory=dict)
    answers: dict[str, int] = field(default_factory=dict)
    payloads: dict[str, bytes] = field(default_factory=dict)  # async-response id → its payload
    reconnects: int = 0

    def take(self, message: dict[str, Any]) -> None:
        for event in message.get("notifications", []):
            if event.get("path") == TEMPERATURE:
                self.values.setdefault(event["ep"], set()).add(float(base64.b64decode(event["payload"])))
        for event in message.get("async-responses", []):
            self.answers[event["id"]] = event.get("status", 0)
            self.payloads[event["id"]] = base64.b64decode(event.get("payload") or "")


class SocketApp(App):
    """A WebSocket channel at `first_url`; when the socket closes, reconnected at `front_url`, until stopped."""

    def __init__(self, key: str, http: aiohttp.ClientSession, first_url: str, front_url: str) -> None:
        super().__init__(key)
        self._http, self._url, self._front = http, first_url, front_url
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        async with self._http.put(f"{self._url}/v2/notification/websocket", headers=self._auth()) as r:
            assert r.status == 201, r.status
        self._task = asyncio.create_task(self._run())

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    async def _run(self) -> None:
        url = self._url
        while True:
            try:
                async with self._http.ws_connect(
                    f"{url}/v2/notification/websocket-connect", headers=self._auth()
                ) as ws:
                    async for frame in ws:
                        if frame.type == aiohttp.WSMsgType.TEXT:
                            self.take(json.loads(frame.data))
            except (aiohttp.ClientError, OSError):
                await asyncio.sleep(0.2)  # the front's other nodes answer; nginx marks the dead one down
            url = self._front
            self.reconnects += 1

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class Callbacks:
    """The callback receiver of every callback key: `/cb/<n>` is key n's URL."""

    def __init__(self) -> None:
        self.apps: list[App] = []
        self._runner: web.AppRunner | None = None
        self.base = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/cb/{n}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base = f"http://127.0.0.1:{port}/cb"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.method == "PUT" and body in (b"", b"{}"):
            return web.Response(status=200)  # the channel's verification
        self.apps[int(request.match_info["n"])].take(json.loads(body))
        return web.Response(status=200)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def new_key(http: aiohttp.ClientSession, front: str, admin_key: str, name: str) -> str:
    headers = {"Authorization": f"Bearer {admin_key}"}
    async with http.post(f"{front}/v3/api-keys", json={"name": name}, headers=headers) as r:
        assert r.status == 201, (r.status, await r.text())
        return str((await r.json())["key"])


async def subscribe(http: aiohttp.ClientSession, front: str, key: str, prefix: str) -> None:
    rules = [{"endpoint-name": f"{prefix}*", "resource-path": [TEMPERATURE]}]
    async with http.put(f"{front}/v2/subscriptions", json=rules, headers={"Authorization": f"Bearer {key}"}) as r:
        assert r.status in (200, 202, 204), r.status


@dataclass
class Applications:
    sockets: list[SocketApp]
    callbacks: Callbacks

    @property
    def all(self) -> list[App]:
        return [*self.sockets, *self.callbacks.apps]

    async def stop(self) -> None:
        for app in self.sockets:
            await app.stop()
        await self.callbacks.stop()


async def applications(
    http: aiohttp.ClientSession, front: str, node_urls: Sequence[str], admin_key: str, prefix: str
) -> Applications:
    """A WebSocket key on each node and a callback key per node, each subscribed to the fleet's temperature."""
    callbacks = Callbacks()
    await callbacks.start()
    sockets = []
    for n, url in enumerate(node_urls):
        key = await new_key(http, front, admin_key, f"ws-{n}")
        await subscribe(http, front, key, prefix)
        app = SocketApp(key, http, url, front)
        await app.start()
        sockets.append(app)
    for n in range(len(node_urls)):
        key = await new_key(http, front, admin_key, f"cb-{n}")
        await subscribe(http, front, key, prefix)
        callbacks.apps.append(App(key))
        body = {"url": f"{callbacks.base}/{n}"}
        async with http.put(
            f"{front}/v2/notification/callback", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as r:
            assert r.status in (200, 201, 204), (r.status, await r.text())
    return Applications(sockets, callbacks)


@contextlib.asynccontextmanager
async def registered_fleet(
    http: aiohttp.ClientSession, three: ThreeNodes, count: int, prefix: str
) -> AsyncIterator[tuple[Applications, list[RecordingDevice], redis.Redis]]:
    """The applications (`applications`), then `count` devices (`fleet`) registered through the front and recorded
    as held by a node, and a client of the cluster's Redis; after, the devices stopped without deregistering (a
    killed node's devices keep their registrations) and the applications stopped."""
    front, nodes = three.front, three.nodes
    apps = await applications(http, front.base_url, [n.base_url for n in nodes], nodes[0].api_key, prefix)
    devices = fleet(front.coap_address, count, prefix)
    await asyncio.gather(*(device.start() for device in devices))
    client = redis.Redis.from_url(three.redis_url)
    try:
        await eventually(lambda: all(d.device_id for d in devices), within=15, what="the fleet registered")
        await eventually(lambda: len(three.holders()) == count, within=15, what="holders recorded")
        yield apps, devices, client
    finally:
        client.close()
        await asyncio.gather(*(device.stop(deregister=False) for device in devices))
        await apps.stop()


async def subscribe_through(http: aiohttp.ClientSession, front: str, app: App, device_id: str, path: str) -> str:
    """A subscription through the front (any live node; round robin): its async-response id."""
    async with http.put(
        f"{front}/v2/subscriptions/{device_id}{path}", headers={"Authorization": f"Bearer {app.key}"}
    ) as r:
        assert r.status == 202, (r.status, await r.text())
        return str((await r.json())["async-response-id"])


async def request_all(
    http: aiohttp.ClientSession, front: str, apps: Sequence[App], devices: Sequence[SimDevice], tag: str
) -> list[tuple[App, str]]:
    """A GET /3/0/0 for every device through the front, by the apps in turn; the (app, async-id) pairs sent."""
    sent = []
    for n, device in enumerate(devices):
        app = apps[n % len(apps)]
        async_id = f"{tag}-{n}"
        async with http.post(
            f"{front}/v2/device-requests/{device.device_id}?async-id={async_id}",
            json={"method": "GET", "uri": "/3/0/0"},
            headers={"Authorization": f"Bearer {app.key}"},
        ) as r:
            assert r.status == 202, r.status
        sent.append((app, async_id))
    return sent
