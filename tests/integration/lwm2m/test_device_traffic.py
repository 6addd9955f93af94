"""Requests, observations, auto-observation, Send and block-wise transfer between the server and a real client."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from devicehub._core import coap_encode_uint
from devicehub.clock import ManualClock
from devicehub.lwm2m import codes
from devicehub.sim.objects import BATTERY, TEMPERATURE
from support.node import device, reported, run, running_node, wait_reported
from support.waiting import eventually


def test_read_write_execute_and_write_attributes_reach_the_device(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "rw-1") as sim:
            device_id = sim.device_id or ""
            read = await node.lwm2m.request(device_id, "GET", "/3/0/0")
            assert (read.code, read.content_format, read.payload) == (codes.CONTENT, 0, b"devicehub")
            instance = await node.lwm2m.request(device_id, "GET", "/3303/0", accept=11542)
            assert instance.content_format == 11542 and instance.payload
            write = await node.lwm2m.request(device_id, "PUT", "/3311/0/5851", b"42", content_format=0)
            assert write.code == codes.CHANGED and sim.log.writes == [("/3311/0/5851", 42)]
            refused = await node.lwm2m.request(device_id, "PUT", "/3/0/0", b"x", content_format=0)
            assert refused.code == codes.METHOD_NOT_ALLOWED
            attributes = await node.lwm2m.request(device_id, "PUT", "/3303/0/5700?pmin=2&pmax=60&st=0.5")
            assert attributes.code == codes.CHANGED
            assert sim.log.attribute_queries == [("/3303/0/5700", ["pmin=2", "pmax=60", "st=0.5"])]
            execute = await node.lwm2m.request(device_id, "POST", "/3/0/4", b"now")
            assert execute.code == codes.CHANGED and sim.log.executes == [("/3/0/4", b"now")]
            missing = await node.lwm2m.request(device_id, "GET", "/3/0/77")
            assert missing.code == codes.NOT_FOUND

    run(scenario())


def test_observed_value_changes_reach_the_snapshot_and_cancel_stops_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "obs-1", flavor="oma") as sim:
            device_id = sim.device_id or ""
            response = await node.lwm2m.observe(device_id, TEMPERATURE)
            assert response.code == codes.CONTENT and response.observe == 0
            sim.set_value(TEMPERATURE, 30.25)
            await wait_reported(node, device_id, TEMPERATURE, b"30.25")
            await node.lwm2m.cancel_observe(device_id, TEMPERATURE)
            assert sim.observers.by_token == {}  # the proactive cancel (GET Observe=1, same token) reached the client

    run(scenario())


def test_auto_observed_resource_notifies_without_any_observe_request(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "aobs-1", flavor="pelion") as sim:
            device_id = sim.device_id or ""
            assert await reported(node, device_id, "/3/0/0") == b"devicehub"  # `;v=` value of the register
            sim.set_value(BATTERY, 57)
            await wait_reported(node, device_id, BATTERY, b"57")
            await eventually(lambda: sim.counters.notifications == 1)  # the CON notification was ACKed

    run(scenario())


def test_send_operation_values_are_taken_as_notifications(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "send-1", flavor="oma") as sim:
            sim.model.resource(TEMPERATURE).value = 19.5  # type: ignore[union-attr]
            assert await sim.send_values([TEMPERATURE]) == codes.CHANGED
            await wait_reported(node, sim.device_id or "", TEMPERATURE, b"19.5")

    run(scenario())


def test_block1_register_payload_is_reassembled(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "block-helper") as sim:
            server = ("127.0.0.1", node.coap_port)
            links = ",".join(f"</{3300 + n}/0/5700>" for n in range(120)).encode()  # ≈2.4 KB
            size = 1024
            blocks = [links[i : i + size] for i in range(0, len(links), size)]
            query = [(codes.URI_QUERY, b"ep=big-1"), (codes.URI_QUERY, b"lt=300")]
            for number, chunk in enumerate(blocks):
                more = number < len(blocks) - 1
                option = (codes.BLOCK1, coap_encode_uint(number << 4 | (0x8 if more else 0) | 6))
                response = await sim.endpoint.request(
                    server, codes.POST, [(codes.URI_PATH, b"rd"), *query, option], chunk
                )
                assert response.code == (codes.CONTINUE if more else codes.CREATED)
            registration = node.lwm2m.registration(response.location_path[-1])
            assert registration is not None and len(registration.links) == 120

    run(scenario())


def test_queue_mode_request_waits_for_the_next_update(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node, device(node, "queue-1", queue_mode=True) as sim:
            device_id = sim.device_id or ""
            await clock.advance(60)  # past the window in which a queue-mode device listens
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.post(
                    f"/v2/device-requests/{device_id}?async-id=q1", json={"method": "GET", "uri": "/3/0/0"}
                ) as answer:
                    assert answer.status == 202, await answer.text()
            assert [r.async_id for r in await node.store.pending_requests(device_id)] == ["q1"]
            assert sim.counters.requests == 0
            assert await sim.update() == codes.CHANGED
            await eventually(lambda: sim.counters.requests == 1)
            await eventually(
                lambda: node.store.pending_requests(device_id),
                accept=lambda pending: not pending,
                what="no request pending after the update",
                every=0.01,
            )

    run(scenario())


def test_a_request_queued_for_a_known_device_is_sent_when_it_registers_again(tmp_path: Path) -> None:
    """issue 16 #1: only a device stored for the first time skips the queue check at registration."""

    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node, device(node, "queue-2", queue_mode=True) as sim:
            device_id = sim.device_id or ""
            await clock.advance(60)  # past the window in which a queue-mode device listens
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.post(
                    f"/v2/device-requests/{device_id}?async-id=q2", json={"method": "GET", "uri": "/3/0/0"}
                ) as answer:
                    assert answer.status == 202, await answer.text()
            assert sim.counters.requests == 0
            await sim.register()  # a restart: a full registration of the known device
            assert sim.device_id == device_id
            await eventually(lambda: sim.counters.requests == 1)

    run(scenario())


def test_an_admission_is_new_only_for_the_first_register_of_an_endpoint(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            first = await node.devices.admit("admit-1", "")
            again = await node.devices.admit("admit-1", "")
            assert first is not None and again is not None
            assert (first.new, again.new) == (True, False) and again.device_id == first.device_id

    run(scenario())


def test_instance_observation_notifies_tlv_and_the_snapshot_keeps_each_resource(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "wild-1", flavor="oma") as sim:
            device_id = sim.device_id or ""
            response = await node.lwm2m.observe(device_id, "/3303/0")
            assert response.code == codes.CONTENT and response.content_format == 11542
            sim.set_value(TEMPERATURE, 25.0)
            # issue 32 #1: the object model types each TLV value (5700 a Float, 5701 a String): kept as text
            await wait_reported(node, device_id, TEMPERATURE, b"25.0")
            units = await reported(node, device_id, "/3303/0/5701")
            assert units == b"Cel"

    run(scenario())


def test_pmin_holds_back_notifications_and_pmax_sends_them_without_a_change(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "pminmax-1", flavor="oma") as sim:
            device_id = sim.device_id or ""
            await node.lwm2m.request(device_id, "PUT", "/3303/0/5700?pmin=0.3&pmax=1.5")
            await node.lwm2m.observe(device_id, TEMPERATURE)
            sim.set_value(TEMPERATURE, 1.0)
            sim.set_value(TEMPERATURE, 2.0)  # inside pmin: the two changes leave as one notification
            await wait_reported(node, device_id, TEMPERATURE, b"2.0")
            assert sim.counters.notifications == 1
            await eventually(lambda: sim.counters.notifications >= 2, within=5)  # pmax: again, unchanged

    run(scenario())
