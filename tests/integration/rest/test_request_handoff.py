"""Device requests this node queued reach the device's worker in memory (issue 15): no read of the queue per request,
each request delivered once and in order, also when the queue is read from the store meanwhile (a registration
update kicks the device) and requests are queued while that read runs. The device is the simulator over real UDP."""

from __future__ import annotations

import base64
from pathlib import Path

from devicehub.domain.model import DeviceRequest
from support.apps import websocket_app
from support.node import device, run, running_node

DIMMER = "/3311/0/5851"


def test_queued_requests_are_delivered_once_in_order_without_a_queue_read_each(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path, redis_url=store_url) as node,
            device(node, "handoff-1", flavor="oma") as sim,
            websocket_app(node) as (http, events),
        ):
            device_id = sim.device_id or ""
            queue = node.devices.requests
            store = node.store
            read_queue = store.pending_requests
            reads = 0
            raced = False
            caller = await node.accounts.authenticate(node.dev_api_key)

            def direct(n: int) -> DeviceRequest:
                now = node.clock.now()
                return DeviceRequest(
                    async_id=f"mem-{n}",
                    key_id=caller.key_id,
                    account_id=caller.account_id,
                    device_id=device_id,
                    method="PUT",
                    uri=DIMMER,
                    payload=str(n).encode(),
                    content_type="text/plain",
                    created_at=now,
                    expires_at=now + 60,
                )

            async def counted(wanted: str) -> list[DeviceRequest]:
                nonlocal reads, raced
                reads += 1
                if not raced and wanted == device_id:
                    raced = True
                    await queue.submit(direct(100))  # committed before the read: the read returns it as well
                    found = await read_queue(wanted)
                    await queue.submit(direct(101))  # committed after it: only the handoff carries it
                    return found
                return await read_queue(wanted)

            async def put(n: int) -> None:
                async with http.post(
                    f"/v2/device-requests/{device_id}?async-id=w-{n}",
                    json={"method": "PUT", "uri": DIMMER, "payload-b64": base64.b64encode(b"%d" % n).decode()},
                ) as r:
                    assert r.status == 202, await r.text()

            store.pending_requests = counted  # type: ignore[method-assign]

            for n in range(5):
                await put(n)
            for n in range(5):
                await events.wait_for("async-responses", lambda e, n=n: e["id"] == f"w-{n}")
            assert reads == 0  # every one came to the worker in memory
            await sim.update()  # the device updates: its worker reads the queue from the store
            for n in range(5, 10):
                await put(n)
            for async_id in [*(f"w-{n}" for n in range(5, 10)), "mem-100", "mem-101"]:
                await events.wait_for("async-responses", lambda e, a=async_id: e["id"] == a)
            assert raced and reads >= 1
            written = [value for path, value in sim.log.writes if path == DIMMER]
            assert sorted(written) == sorted([*range(10), 100, 101]), written  # each delivered once
            assert written[:5] == [0, 1, 2, 3, 4] and written.index(100) < written.index(101)
            assert await read_queue(device_id) == []

    run(scenario())
