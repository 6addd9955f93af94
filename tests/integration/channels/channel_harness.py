"""A real aiohttp API server with the notification routes on 127.0.0.1, and a real callback receiver."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import msgspec
from aiohttp import web

from devicehub.api.app import add_routes
from devicehub.api.context import SERVICES, Services
from devicehub.api.errors import error_middleware
from devicehub.api.notification_routes import release_clients
from devicehub.api.routes import ROUTES
from devicehub.channels.hub import ChannelHub
from devicehub.clock import ManualClock
from devicehub.config import ServeSettings
from devicehub.domain.accounts import AccountService, Principal
from devicehub.domain.events import NotificationEvent
from devicehub.store.sqlite.store import SqliteStore

HANG = 0  # a receiver answer: hold the request until the test ends
LOOPBACK = "127.0.0.0/8"  # receivers in these tests listen on loopback, which callbacks may reach only when allowed


def run(coro: Coroutine[Any, Any, None], timeout: float = 30.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def ticking(clock: ManualClock, step: float = 0.01) -> AsyncIterator[None]:
    """Move the clock `step` seconds every real millisecond meanwhile: for exchanges with a real client whose
    answers (pongs) arrive in real time while the server's timers run on the clock."""

    async def tick() -> None:
        while True:
            await clock.advance(step)
            await asyncio.sleep(0.001)

    ticker = asyncio.create_task(tick())
    try:
        yield
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)


def note(n: int, device: str = "d" * 32) -> NotificationEvent:
    return NotificationEvent(
        device_id=device,
        endpoint_name="node-1",
        path="/3303/0/5700",
        content_type="text/plain",
        payload=str(n).encode(),
    )


def payloads(body: bytes) -> list[int]:
    """The notification values of a NotificationMessage, in order."""
    message = msgspec.json.decode(body)
    return [int(base64.b64decode(item["payload"])) for item in message.get("notifications", [])]


@dataclass
class Received:
    method: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """The application's callback URL: answers from a script, records every request."""

    answers: list[int] = field(default_factory=list)
    default: int = 200
    requests: asyncio.Queue[Received] = field(default_factory=asyncio.Queue)
    count: int = 0
    _release: asyncio.Event = field(default_factory=asyncio.Event)
    tls: ssl.SSLContext | None = None
    _runner: web.AppRunner | None = None
    url: str = ""

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/cb", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        scheme = "https" if self.tls else "http"
        self.url = f"{scheme}://127.0.0.1:{port_of(self._runner)}/cb"
        return self

    async def __aenter__(self) -> Receiver:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def next(self, within: float = 5.0) -> Received:
        return await asyncio.wait_for(self.requests.get(), within)

    async def _handle(self, request: web.Request) -> web.Response:
        self.count += 1
        status = self.answers.pop(0) if self.answers else self.default
        await self.requests.put(Received(request.method, dict(request.headers), await request.read()))
        if status == HANG:
            await self._release.wait()
            status = 503
        return web.Response(status=status)


def port_of(runner: web.BaseRunner) -> int:
    """The port of the runner's one site (bound to port 0), from the addresses its listening sockets have."""
    addresses = runner.addresses
    assert addresses, "the runner has no site started"
    return int(addresses[0][1])


@dataclass
class Harness:
    clock: ManualClock
    store: SqliteStore
    hub: ChannelHub
    accounts: AccountService
    base: str
    http: aiohttp.ClientSession
    secret: str = ""
    caller: Principal | None = None

    @property
    def key_id(self) -> str:
        assert self.caller is not None
        return self.caller.key_id

    async def new_key(self, account: str = "acme", *, tier: str = "commercial") -> tuple[str, Principal]:
        existing = await self.store.find_account_by_name(account)
        account_id = existing.id if existing else (await self.accounts.create_account(account, tier=tier)).id
        _, secret = await self.accounts.create_key(account_id)
        return secret, await self.accounts.authenticate(secret)

    def auth(self, secret: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret or self.secret}"}

    def ws_url(self) -> str:
        return self.base.replace("http://", "ws://") + "/v2/notification/websocket-connect"

    async def call(
        self, method: str, path: str, *, secret: str | None = None, json: Any = None, data: bytes | None = None
    ) -> tuple[int, bytes]:
        async with self.http.request(
            method, self.base + path, headers=self.auth(secret), json=json, data=data
        ) as response:
            return response.status, await response.read()


async def start_hub(store: SqliteStore, clock: ManualClock, settings: ServeSettings, **hub_kwargs: Any) -> ChannelHub:
    # the hub's timers run on the manual clock: a test that wants pings, frame coalescing or sweeps moves it
    options: dict[str, Any] = {
        "sweep_interval": 10_000_000.0,
        "ping_interval": 10_000_000.0,
        "websocket_coalesce": 0.0,
        **hub_kwargs,
    }
    hub = ChannelHub(store, clock, settings, **options)
    await hub.start()
    return hub


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path,
    *,
    tier: str = "commercial",
    clock: ManualClock | None = None,
    settings: ServeSettings | None = None,
    **hub_kwargs: Any,
) -> AsyncIterator[Harness]:
    """Store, hub and API on a free port with one account and key; everything is stopped afterwards."""
    clock = clock or ManualClock()
    store = SqliteStore(tmp_path / "data")
    await store.open()
    settings = settings or ServeSettings(data_dir=tmp_path / "data", flush_interval_ms=20, callback_allow=LOOPBACK)
    hub = await start_hub(store, clock, settings, **hub_kwargs)
    accounts = AccountService(store, clock)
    app = web.Application(middlewares=[error_middleware])
    app[SERVICES] = Services(
        settings=settings, clock=clock, store=store, accounts=accounts, hub=hub, devices=cast(Any, None)
    )
    add_routes(app, tuple(r for r in ROUTES if r.path.startswith("/v2/notification/")))
    app.on_shutdown.append(release_clients)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    http = aiohttp.ClientSession()
    harness = Harness(clock, store, hub, accounts, f"http://127.0.0.1:{port_of(runner)}", http)
    harness.secret, harness.caller = await harness.new_key(tier=tier)
    try:
        yield harness
    finally:
        await http.close()
        await harness.hub.stop()
        await runner.cleanup()
        await store.close()
