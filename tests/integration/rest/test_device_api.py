"""The application API through real HTTP against a running node with simulated devices on real UDP (issue 6):
device requests and their async-responses, the echo snapshot, request expiry, account isolation, bad input."""

from __future__ import annotations

import base64
import io
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devicehub.clock import ManualClock
from devicehub.domain.model import DeviceRequest
from devicehub.errors import StorageUnavailable
from support.apps import websocket_app as app
from support.node import device, run, running_node
from support.waiting import eventually


async def request(http: aiohttp.ClientSession, device_id: str, async_id: str, body: dict[str, Any]) -> None:
    async with http.post(f"/v2/device-requests/{device_id}?async-id={async_id}", json=body) as r:
        assert r.status == 202, await r.text()


async def echo(http: aiohttp.ClientSession, device_id: str, path: str) -> dict[str, Any]:
    async with http.get(f"/v3/devices/{device_id}/echo") as r:
        assert r.status == 200
        resources = (await r.json())["resources"]
    return next((x for x in resources if x["resource_path"] == path), {})


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_read_write_attributes_and_execute_answer_with_async_responses_and_fill_the_echo(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path) as node,
            device(node, "api-1") as sim,
            app(node) as (
                http,
                events,
            ),
        ):
            device_id = sim.device_id or ""
            await request(http, device_id, "read-1", {"method": "GET", "uri": "/3/0/0"})
            read = await events.wait_for("async-responses", lambda e: e["id"] == "read-1")
            assert read["status"] == 200 and base64.b64decode(read["payload"]) == b"devicehub"
            assert (await echo(http, device_id, "/3/0/0"))["reported"]["value"] == b64("devicehub")

            await request(
                http, device_id, "write-1", {"method": "PUT", "uri": "/3311/0/5851", "payload-b64": b64("42")}
            )
            write = await events.wait_for("async-responses", lambda e: e["id"] == "write-1")
            assert write["status"] == 200 and sim.log.writes == [("/3311/0/5851", 42)]
            desired = (await echo(http, device_id, "/3311/0/5851"))["desired"]
            assert desired["value"] == b64("42") and desired["status"] == 1  # spec §3.1: success
            assert desired["desired_at"] and desired["status_updated_at"]

            await request(http, device_id, "attrs-1", {"method": "PUT", "uri": "/3303/0/5700?pmin=5&pmax=60&lt=3"})
            attrs = await events.wait_for("async-responses", lambda e: e["id"] == "attrs-1")
            assert attrs["status"] == 200
            assert sim.log.attribute_queries == [("/3303/0/5700", ["pmin=5", "pmax=60", "lt=3"])]
            assert "desired" not in await echo(http, device_id, "/3303/0/5700")  # attributes are not values

            await request(http, device_id, "exec-1", {"method": "POST", "uri": "/3/0/4", "payload-b64": b64("now")})
            execute = await events.wait_for("async-responses", lambda e: e["id"] == "exec-1")
            assert execute["status"] == 200 and sim.log.executes == [("/3/0/4", b"now")]
            # issue 32 #5: Reboot brings the device back with a fresh Register, which the application sees
            await events.wait_for("registrations", lambda e: e["original-ep"] == "api-1")
            assert sim.reboots == 1 and sim.counters.registrations == 2

    run(scenario())


def test_write_to_a_read_only_resource_is_refused_and_leaves_no_desired_value(tmp_path: Path) -> None:
    """issue 32 #1: the object model says /3/0/0 (Manufacturer) is read-only: 405 at once, nothing sent to the
    device, no failed "desired" value left behind (it used to be sent, answered 4.05 and recorded failed)."""

    async def scenario() -> None:
        async with (
            running_node(tmp_path) as node,
            device(node, "ro-1", flavor="oma") as sim,
            app(node) as (
                http,
                _events,
            ),
        ):
            device_id = sim.device_id or ""
            body = {"method": "PUT", "uri": "/3/0/0", "payload-b64": b64("x")}
            async with http.post(f"/v2/device-requests/{device_id}?async-id=w-ro", json=body) as r:
                assert r.status == 405 and await r.text() == "METHOD_NOT_ALLOWED"
            assert sim.log.writes == []
            assert "desired" not in await echo(http, device_id, "/3/0/0")

    run(scenario())


def test_a_device_request_body_is_read_whether_its_length_is_announced_or_it_comes_chunked(tmp_path: Path) -> None:
    """A body with Content-Length is read in one go, a chunked one piece by piece (no length to check up front):
    both requests reach the device and answer; a chunked body over the limit is 413 all the same."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "body-1") as sim, app(node) as (http, events):
            device_id = sim.device_id or ""
            body = json.dumps({"method": "GET", "uri": "/3/0/0"}).encode()
            for async_id, data in (("sized", body), ("chunked", _chunked(body, 7))):
                async with http.post(
                    f"/v2/device-requests/{device_id}?async-id={async_id}",
                    data=data,
                    headers={"Content-Type": "application/json"},
                ) as r:
                    assert r.status == 202, await r.text()
                    assert (r.request_info.headers.get("Transfer-Encoding") == "chunked") == (async_id == "chunked")
                answer = await events.wait_for("async-responses", lambda e, a=async_id: e["id"] == a)
                assert answer["status"] == 200
            big = json.dumps({"method": "PUT", "uri": "/3/0/0", "payload-b64": "A" * (2 * 1024 * 1024)}).encode()
            async with http.post(
                f"/v2/device-requests/{device_id}?async-id=big-chunked",
                data=_chunked(big, 65536),
                headers={"Content-Type": "application/json"},
            ) as r:
                assert r.status == 413

    run(scenario())


async def _chunked(body: bytes, size: int) -> Any:
    """A request body without a length: aiohttp's client sends an async generator with chunked transfer coding."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_subscribed_turns_true_only_after_the_device_confirms(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path) as node,
            device(node, "sub-1") as sim,
            app(node) as (
                http,
                events,
            ),
        ):
            device_id = sim.device_id or ""
            assert (await echo(http, device_id, "/3303/0/5700"))["subscribed"] is False
            async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700") as r:
                assert r.status == 202
                async_id = (await r.json())["async-response-id"]
            confirmation = await events.wait_for("async-responses", lambda e: e["id"] == async_id)
            assert confirmation["status"] == 200
            assert (await echo(http, device_id, "/3303/0/5700"))["subscribed"] is True

    run(scenario())


def test_a_request_to_an_offline_device_expires_with_an_async_response(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node, app(node) as (http, events):
            async with device(node, "gone-1", flavor="oma") as sim:
                device_id = sim.device_id or ""
            # the simulator de-registered on leaving: the device is offline
            await request(http, device_id, "late-1", {"method": "GET", "uri": "/3/0/0"})
            async with http.get(f"/v3/devices/{device_id}") as r:
                assert (await r.json())["state"] == "deregistered"
            await request_with_expiry(http, device_id)  # expiry-seconds=60 (late-1 keeps the default 7200 s)
            expired = None
            for _ in range(30):  # move the clock in steps: the expiry loop wakes once a clock second
                await clock.advance(5)
                try:
                    expired = await events.wait_for("async-responses", lambda e: e["id"] == "late-2", timeout=0.3)
                    break
                except TimeoutError:
                    continue
            assert expired is not None, "no REQUEST_EXPIRED after 150 clock seconds"
            assert expired["status"] == 429 and expired["error"] == "REQUEST_EXPIRED"
            assert [r.async_id for r in await node.store.pending_requests(device_id)] == ["late-1"]

    run(scenario())


async def request_with_expiry(http: aiohttp.ClientSession, device_id: str) -> None:
    async with http.post(
        f"/v2/device-requests/{device_id}?async-id=late-2&expiry-seconds=60", json={"method": "GET", "uri": "/3/0/0"}
    ) as r:
        assert r.status == 202, await r.text()


def test_another_accounts_device_is_404(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "mine-1") as sim:
            other = await node.accounts.create_account("other")
            _, other_key = await node.accounts.create_key(other.id, "app")
            device_id = sim.device_id or ""
            headers = {"Authorization": f"Bearer {other_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                for method, url in (
                    ("GET", f"/v3/devices/{device_id}"),
                    ("GET", f"/v3/devices/{device_id}/echo"),
                    ("GET", f"/v2/endpoints/{device_id}"),
                    ("PUT", f"/v2/subscriptions/{device_id}/3303/0/5700"),
                ):
                    async with http.request(method, url) as r:
                        assert r.status == 404, (method, url, r.status)
                async with http.post(
                    f"/v2/device-requests/{device_id}?async-id=x1", json={"method": "GET", "uri": "/3/0/0"}
                ) as r:
                    assert r.status == 404
                async with http.get("/v3/devices") as r:
                    assert (await r.json())["data"] == []

    run(scenario())


def test_bad_input_gets_its_status_and_stores_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "bad-1") as sim, app(node) as (http, _):
            device_id = sim.device_id or ""
            rules = [{"endpoint-name": "bad-*", "resource-path": ["/3/0/0"]}]
            async with http.put("/v2/subscriptions", json=rules) as r:
                assert r.status == 202
            async with http.put(
                "/v2/subscriptions", data=b"[{not json", headers={"Content-Type": "application/json"}
            ) as r:
                assert r.status == 400
            async with http.put("/v2/subscriptions", json=[{"endpoint-name": 7}]) as r:
                assert r.status == 400
            async with http.get("/v2/subscriptions") as r:
                assert await r.json() == rules  # the bad PUTs changed nothing
            async with http.post(
                f"/v2/device-requests/{device_id}?async-id=bad%20id", json={"method": "GET", "uri": "/3/0/0"}
            ) as r:
                assert r.status == 400
            async with http.post(f"/v2/device-requests/{device_id}?async-id=ok-1", json={"method": "GET"}) as r:
                assert r.status == 400
            async with http.post(
                f"/v2/device-requests/{'f' * 32}?async-id=ok-2", json={"method": "GET", "uri": "/3/0/0"}
            ) as r:
                assert r.status == 404
            big = json.dumps({"method": "PUT", "uri": "/3311/0/5706", "payload-b64": "A" * (2 * 1024 * 1024)})
            async with http.post(
                f"/v2/device-requests/{device_id}?async-id=big-1",
                data=io.BytesIO(big.encode()),
                headers={"Content-Type": "application/json"},
            ) as r:
                assert r.status == 413
            assert await node.store.pending_requests(device_id) == []
            async with http.get(f"/v3/devices/{'f' * 32}") as r:
                assert r.status == 404
                assert r.content_type == "application/json" and (await r.json())["code"] == 404
            async with http.get("/v3/devices", headers={"Authorization": "Bearer ak_wrong"}) as r:
                assert r.status == 401

    run(scenario())


def test_openapi_document_and_docs_page_are_served(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as http:
            async with http.get("/openapi.json") as r:
                assert r.status == 200
                document = await r.json()
            assert document["openapi"].startswith("3.")
            for path in ("/v2/subscriptions/{device-id}/{resourcePath}", "/v3/devices/{device-id}/echo"):
                assert any(
                    p.replace("{device_id}", "{device-id}").startswith(path.split("/{resourcePath}")[0])
                    for p in document["paths"]
                ), path
            async with http.get("/docs") as r:
                assert r.status == 200 and "text/html" in r.content_type

    run(scenario())


def test_snapshots_of_devices_unseen_for_six_months_are_swept(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node:
            async with device(node, "old-1") as sim:
                device_id = sim.device_id or ""
            assert (await node.store.get_device(device_id)) is not None  # de-registered, kept
            clock.jump(182 * 86400)
            assert await node.devices.sweep_snapshots() == 0  # spec §2.4: kept for six months
            assert (await node.store.get_device(device_id)) is not None
            clock.jump(2 * 86400)
            assert await node.devices.sweep_snapshots() == 1
            assert await node.store.get_device(device_id) is None
            assert await node.store.get_snapshot(device_id) == []

    run(scenario())


def test_request_workers_leave_when_done_so_registrations_leave_no_task_behind(tmp_path: Path) -> None:
    """Every registration kicks the device's request worker; one that finds nothing to deliver leaves at once
    (100 000 devices kept 100 000 finished tasks), and one with work leaves once its queue is delivered."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            queue = node.devices.requests
            async with device(node, "idle-1"), device(node, "idle-2"), device(node, "busy-1") as busy:
                await eventually(lambda: not queue.draining())
                headers = {"Authorization": f"Bearer {node.dev_api_key}"}
                async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                    for async_id in ("w1", "w2", "w3"):
                        await request(http, busy.device_id or "", async_id, {"method": "GET", "uri": "/3/0/0"})
                    await eventually(lambda: not queue.draining())
                    assert await node.store.pending_requests(busy.device_id or "") == []  # delivered, then left

    run(scenario())


def test_a_request_worker_that_cannot_read_its_queue_leaves_quietly_and_the_next_kick_delivers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Redis storm found it: re-registering devices each kick their request worker, and when the store could
    not answer (every pooled connection busy) each worker died with "Task exception was never retrieved". Now the
    requests stay queued, the miss is counted and said once, and the device's next kick delivers them."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "miss-1") as sim:
            device_id = sim.device_id or ""
            queue = node.devices.requests
            real = node.store.pending_requests
            failures = 2

            async def flaky(device: str) -> list[Any]:
                nonlocal failures
                if failures:
                    failures -= 1
                    raise StorageUnavailable("the service cannot store changes right now")
                return await real(device)

            node.store.pending_requests = flaky  # type: ignore[method-assign]
            caller = await node.accounts.authenticate(node.dev_api_key)
            now = node.clock.now()
            async with app(node) as (_http, events):
                # queued as another node (or this one before a restart) queues it: found by reading the queue (a
                # request this node queues itself reaches the worker in memory, issue 15)
                await node.store.enqueue_request(
                    DeviceRequest(
                        async_id="m1",
                        key_id=caller.key_id,
                        account_id=caller.account_id,
                        device_id=device_id,
                        method="GET",
                        uri="/3/0/0",
                        created_at=now,
                        expires_at=now + 60,
                    )
                )
                queue.kick(device_id)  # its worker misses
                await eventually(lambda: queue.store_misses == 1 and not queue.draining())
                queue.kick(device_id)  # misses again
                await eventually(lambda: queue.store_misses == 2 and not queue.draining())
                queue.kick(device_id)  # what the device's next Update does
                answer = await events.wait_for("async-responses", lambda e: e["id"] == "m1")
                assert answer["status"] == 200

    with caplog.at_level(logging.INFO):
        run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    said = [r for r in caplog.records if "request queues not read" in r.getMessage()]
    assert len(said) == 1  # once a minute, not once per miss
