"""A repeated subscription to a resource the device already notifies about is answered from state (issue 15): no
second Observe reaches the device, the application still gets its async-response with the current value and the
initial value; once the observation ended (a new Register, a cancel, an error notification) the next subscription
observes the device again. The device is the project's simulator over real UDP."""

from __future__ import annotations

import base64
from pathlib import Path

import aiohttp

from devicehub.lwm2m import codes
from devicehub.sim.device import SimDevice
from support.apps import EventReader, websocket_app
from support.node import device, run, running_node, wait_reported
from support.waiting import eventually

TEMPERATURE = "/3303/0/5700"


async def subscribe(http: aiohttp.ClientSession, events: EventReader, device_id: str) -> dict[str, object]:
    async with http.put(f"/v2/subscriptions/{device_id}{TEMPERATURE}") as r:
        assert r.status == 202, await r.text()
        async_id = (await r.json())["async-response-id"]
    answer: dict[str, object] = await events.wait_for("async-responses", lambda e: e["id"] == async_id)
    return answer


def value_of(answer: dict[str, object]) -> bytes:
    return base64.b64decode(str(answer["payload"]))


def test_a_repeated_subscribe_sends_no_second_observe_but_one_after_the_observation_ended(
    tmp_path: Path, store_url: str
) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path, redis_url=store_url) as node,
            device(node, "resub-1", flavor="oma") as sim,
            websocket_app(node) as (http, events),
        ):
            device_id = sim.device_id or ""
            first = await subscribe(http, events, device_id)
            assert first["status"] == 200 and sim.log.observes == [TEMPERATURE]
            sim.set_value(TEMPERATURE, 23.25)
            await events.wait_for("notifications", lambda e: base64.b64decode(e["payload"]) == b"23.25")
            await wait_reported(node, device_id, TEMPERATURE, b"23.25")
            notified = len(events.events("notifications"))

            again = await subscribe(http, events, device_id)  # answered from state
            assert again["status"] == 200 and value_of(again) == b"23.25" and again["ct"] == "text/plain"
            assert sim.log.observes == [TEMPERATURE]  # the device saw no second Observe
            # the subscription's initial value, published before its async-response as an Observe answer's is
            initial = events.events("notifications")[notified:]
            assert [(e["path"], base64.b64decode(e["payload"])) for e in initial] == [(TEMPERATURE, b"23.25")]
            sim.set_value(TEMPERATURE, 22.0)  # the stream was not disturbed: changes still arrive
            await events.wait_for(
                "notifications", lambda e: e["path"] == TEMPERATURE and base64.b64decode(e["payload"]) == b"22.0"
            )

            # a full registration ends every observation (spec §2.1): the next subscription observes the device
            await sim.register()
            await node.lwm2m.flush()
            await eventually(lambda: not node.lwm2m.observing(device_id, TEMPERATURE))
            after_register = await subscribe(http, events, device_id)
            assert after_register["status"] == 200 and sim.log.observes == [TEMPERATURE] * 2
            assert len(sim.observers.by_token) == 1  # the device observes again (the Pelion flavor's auto one aside)

            # an unsubscribe cancels the observation: subscribing again observes the device again
            async with http.delete(f"/v2/subscriptions/{device_id}{TEMPERATURE}") as r:
                assert r.status == 204
            await eventually(lambda: not sim.observers.by_token)
            await subscribe(http, events, device_id)
            assert sim.log.observes == [TEMPERATURE] * 3

    run(scenario())


async def end_with_error_notification(sim: SimDevice, path: str) -> None:
    """The device ends its observation with a 4.04 notification (RFC 7641 §3.2), as a client whose object went."""
    token = next(token for token, observer in sim.observers.by_token.items() if observer.path == path)
    sim.observers.cancel(token)
    await sim.endpoint.send_notification(sim.server, codes.NOT_FOUND, token, [], b"", confirmable=True)


def test_a_subscribe_after_the_device_ended_the_observation_observes_it_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path) as node,
            device(node, "resub-2", flavor="oma") as sim,
            websocket_app(node) as (http, events),
        ):
            device_id = sim.device_id or ""
            await subscribe(http, events, device_id)
            await subscribe(http, events, device_id)
            assert sim.log.observes == [TEMPERATURE]
            await end_with_error_notification(sim, TEMPERATURE)
            assert not node.lwm2m.observing(device_id, TEMPERATURE)
            answer = await subscribe(http, events, device_id)
            assert answer["status"] == 200 and sim.log.observes == [TEMPERATURE] * 2
            assert node.lwm2m.observing(device_id, TEMPERATURE)

    run(scenario())
