"""The REST hot paths off the writer thread (issue 15): keys resolve from a cache that a revocation empties at once
(on the node that revoked, on every other node in Redis mode, and from a `keys revoke` run beside them), and the
hot endpoints answer while a store write is stalled."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import aiohttp
import pytest

from devicehub.domain.accounts import AccountService
from devicehub.node import Node
from devicehub.store.redis.store import RedisStore
from devicehub.store.sqlite.store import SqliteStore
from support.node import device, run, running_node
from support.waiting import eventually

WAIT = 10.0


def base(node: Node) -> str:
    return f"http://127.0.0.1:{node.http_port}"


async def status(http: aiohttp.ClientSession, node: Node, key: str, method: str = "GET", path: str = "") -> int:
    url = base(node) + (path or "/v3/devices")
    async with http.request(method, url, headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status


async def developer_key(http: aiohttp.ClientSession, node: Node) -> tuple[str, str]:
    headers = {"Authorization": f"Bearer {node.dev_api_key}"}
    async with http.post(base(node) + "/v3/api-keys", json={"name": "app"}, headers=headers) as r:
        assert r.status == 201, await r.text()
        created = await r.json()
    return created["id"], created["key"]


def test_a_revoked_key_stops_working_at_once(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, redis_url=store_url) as node, aiohttp.ClientSession() as http:
            key_id, key = await developer_key(http, node)
            for _ in range(3):  # resolved once, then from the node's key cache
                assert await status(http, node, key) == 200
            assert await status(http, node, node.dev_api_key or "", "DELETE", f"/v3/api-keys/{key_id}") == 204
            assert await status(http, node, key) == 401  # the very next call, no TTL waited for
            assert await status(http, node, node.dev_api_key or "") == 200

    run(scenario())


IDLE_TIMEOUT_S = 0.3
ANNOUNCED_WITHIN_S = 2.0


async def refused_on(http: aiohttp.ClientSession, node: Node, key: str) -> None:
    """The key gets 401 on `node` once the revocation's announcement reached it (bounded, polled)."""
    await eventually(
        lambda: status(http, node, key),
        accept=lambda answer: answer == 401,
        within=ANNOUNCED_WITHIN_S,
        what="the revocation reached the node",
        every=0.005,
    )


@pytest.mark.redis
def test_a_key_revoked_on_one_node_stops_working_there_at_once_and_on_the_other_when_announced(
    tmp_path: Path, shared_redis_url: str
) -> None:
    """The revoking node drops the key before it answers; another node drops it when the pub/sub announcement
    reaches it (its own socket read: the same instant cannot be promised across processes, only the order). On a
    Redis Cluster too, where the announcement is a sharded message on the channel's shard (SPUBLISH)."""
    redis_url = shared_redis_url

    async def scenario() -> None:
        async with (
            # a short Redis socket time-out: the revocation channel must not drop while it sits idle longer
            running_node(tmp_path / "a", redis_url=redis_url, redis_timeout=IDLE_TIMEOUT_S) as a,
            running_node(tmp_path / "b", redis_url=redis_url, redis_timeout=IDLE_TIMEOUT_S) as b,
            aiohttp.ClientSession() as http,
        ):
            key_id, key = await developer_key(http, a)
            other_id, other = await developer_key(http, a)
            for node in (a, b, a, b):  # cached on both nodes
                assert await status(http, node, key) == 200
                assert await status(http, node, other) == 200
            await asyncio.sleep(IDLE_TIMEOUT_S * 6)  # the channels sit idle well past the socket time-out
            for node in (a, b):  # subscribed once: no gap in which a revocation could go unheard
                assert node._revocations is not None and node._revocations.subscriptions == 1
            assert await status(http, a, a.dev_api_key or "", "DELETE", f"/v3/api-keys/{key_id}") == 204
            assert await status(http, a, key) == 401
            await refused_on(http, b, key)
            # `devicehub keys revoke` is a process of its own, with a store and no node: every node hears it too
            cli_store = RedisStore(redis_url)
            await cli_store.open()
            try:
                await AccountService(cli_store, a.clock).revoke_key(other_id)
            finally:
                await cli_store.close()
            await refused_on(http, b, other)
            await refused_on(http, a, other)
            assert await status(http, b, b.dev_api_key or "") == 200

    run(scenario())


def test_hot_endpoints_answer_while_a_store_write_is_stalled(tmp_path: Path) -> None:
    """Echo, device, device list and a subscription check are answered while the writer holds SQLite's write lock."""

    async def scenario() -> None:
        async with (
            running_node(tmp_path) as node,
            device(node, "stall-1") as sim,
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {node.dev_api_key}"}) as http,
        ):
            device_id = sim.device_id or ""
            async with http.get(f"{base(node)}/v3/devices/{device_id}/echo") as r:  # warm: the key is cached
                assert r.status == 200
            store = node.store
            assert isinstance(store, SqliteStore)
            entered, release = threading.Event(), threading.Event()

            def work(db: sqlite3.Connection) -> None:
                db.execute("INSERT INTO enrollments (endpoint_name, account_id) VALUES ('stalled', 'x')")
                entered.set()
                release.wait(WAIT)

            stalled = asyncio.ensure_future(store._write(work))
            try:
                assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, WAIT)
                for path in (
                    f"/v3/devices/{device_id}/echo",
                    f"/v3/devices/{device_id}",
                    "/v3/devices?limit=50",
                    f"/v2/subscriptions/{device_id}",
                ):
                    async with http.get(base(node) + path, timeout=aiohttp.ClientTimeout(total=WAIT)) as r:
                        assert r.status in (200, 404), (path, r.status)  # 404: no subscription yet
                        if path.endswith("/echo"):
                            assert (await r.json())["device_id"] == device_id
                assert not stalled.done()  # all answered while the write was still stalled
            finally:
                release.set()
                await stalled

    run(scenario())
