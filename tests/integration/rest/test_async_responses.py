"""Async-responses as Pelion clients read them (issue 11 points 1–2), over a real WebSocket channel with a simulated
device on real UDP: `payload`, `ct` and `max-age` are always there; `error` only for service-side outcomes."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devicehub.errors import StorageUnavailable
from support.apps import EventReader, websocket_app
from support.ddf import ddf
from support.node import device, run, running_node

ALWAYS = {"id", "status", "payload", "ct", "max-age"}


async def ask(http: aiohttp.ClientSession, events: EventReader, device_id: str, async_id: str, body: Any) -> Any:
    async with http.post(f"/v2/device-requests/{device_id}?async-id={async_id}", json=body) as r:
        assert r.status == 202, await r.text()
    return await events.wait_for("async-responses", lambda e: e["id"] == async_id)


def test_an_empty_device_answer_still_carries_payload_ct_and_max_age(tmp_path: Path) -> None:
    """Pelion's system-test library decides completion with `"payload" in async_response` (websocket_handler)."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "empty-1") as sim, websocket_app(node) as (http, ev):
            device_id = sim.device_id or ""
            write = await ask(
                http, ev, device_id, "w-1", {"method": "PUT", "uri": "/3311/0/5851", "payload-b64": "NDI="}
            )
            assert set(write) == ALWAYS, write  # 2.04 Changed has no body: payload "" and no error
            assert write["status"] == 200 and write["payload"] == "" and write["max-age"] == 0
            execute = await ask(http, ev, device_id, "x-1", {"method": "POST", "uri": "/3/0/4"})
            assert set(execute) == ALWAYS and execute["payload"] == ""
            read = await ask(http, ev, device_id, "r-1", {"method": "GET", "uri": "/3/0/0"})
            assert set(read) == ALWAYS and base64.b64decode(read["payload"]) == b"devicehub"
            assert read["ct"] == "text/plain"

    run(scenario())


def test_a_device_error_answer_is_status_and_payload_not_error(tmp_path: Path) -> None:
    """wire-format.md: `error` names a service-side outcome; the device's 4.04/4.05 travels as `status`."""

    async def scenario() -> None:
        async with (
            running_node(tmp_path) as node,
            device(node, "err-1", flavor="oma") as sim,
            websocket_app(node) as (http, ev),
        ):
            device_id = sim.device_id or ""
            missing = await ask(http, ev, device_id, "nf-1", {"method": "GET", "uri": "/3/0/99"})
            assert missing == {"id": "nf-1", "status": 404, "payload": "", "ct": "text/plain", "max-age": 0}
            # the object model would refuse this write itself (issue 32 #1): the account's own definition of
            # object 3 says /3/0/0 is writable, so the request goes and the device's 4.05 comes back
            writable = ddf(3, "Device", (0, "Manufacturer", "RW", "String", ""))
            async with http.post("/v3/lwm2m-objects", data=writable, headers={"Content-Type": "application/xml"}) as r:
                assert r.status == 201
            read_only = await ask(
                http, ev, device_id, "ro-1", {"method": "PUT", "uri": "/3/0/0", "payload-b64": "eA=="}
            )
            assert read_only["status"] == 405 and "error" not in read_only and read_only["payload"] == ""

    run(scenario())


def test_a_subscription_whose_observation_cannot_be_stored_still_answers_and_notifies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The full-disk run found it: the observe behind a subscription stored its token and the `subscribed` flag,
    and a store failure there killed the background task ("Task exception was never retrieved"), so the
    application never got its async-response. Now the stream works in this process and the failure is a line."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "nostore-1", flavor="oma") as sim:
            device_id = sim.device_id or ""

            async def cannot_store(*_args: Any) -> None:
                raise StorageUnavailable("the service cannot store changes right now")

            node.store.put_observation = cannot_store  # type: ignore[method-assign]
            node.store.set_subscribed = cannot_store  # type: ignore[method-assign]
            async with websocket_app(node) as (http, events):
                async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700") as r:
                    assert r.status == 202, await r.text()
                    async_id = (await r.json())["async-response-id"]
                answer = await events.wait_for("async-responses", lambda e: e["id"] == async_id)
                assert answer["status"] == 200
                sim.set_value("/3303/0/5700", 31.5)
                await events.wait_for(  # the value change reaches the application through the stream
                    "notifications",
                    lambda e: e["path"] == "/3303/0/5700" and base64.b64decode(e["payload"]) == b"31.5",
                )

    with caplog.at_level(logging.INFO):
        run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    assert any("not stored (store unavailable)" in r.getMessage() for r in caplog.records)
