"""Registration interface over real UDP: register, update, de-register, expiry, refusals, malformed input."""

from __future__ import annotations

import socket
from pathlib import Path

import aiohttp
import pytest

from devicehub.clock import ManualClock, SystemClock
from devicehub.domain.device_results import DeviceError
from devicehub.domain.model import ResourceLink
from devicehub.lwm2m import codes
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import FLOAT, Resource
from support.node import device, run, running_node
from support.waiting import eventually


def test_register_answers_location_with_account_and_device_id_and_lists_the_device(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "reg-1") as sim:
            registration = node.lwm2m.registration(sim.device_id or "")
            assert registration is not None
            assert sim.location == ["rd", registration.account_id, registration.device_id]
            assert registration.address == sim.address
            stored = await node.store.get_device(registration.device_id)
            assert stored is not None and stored.state == "registered" and stored.endpoint_name == "reg-1"
            assert {r.path for r in stored.resources} >= {"/3/0/0", "/3303/0/5700", "/3311/0/5850"}

    run(scenario())


def test_devices_registering_equal_links_share_one_copy_of_each_link_and_resource_record(tmp_path: Path) -> None:
    """Issue 16 (memory per device): a fleet's equal links, and the resource records built from them, are one
    object each, not one per device; a link that differs (its own value) is its own."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "share-1") as one, device(node, "share-2") as two:
            first, second = (node.lwm2m.registration(sim.device_id or "") for sim in (one, two))
            assert first is not None and second is not None
            by_path = {link.path: link for link in second.links}
            shared = [link for link in first.links if link == by_path.get(link.path)]
            assert len(shared) >= 10 and all(by_path[link.path] is link for link in shared)
            kept = [node.devices.registered_record(r.device_id) for r in (first, second)]
            assert kept[0] is not None and kept[1] is not None
            info = {r.path: r for r in kept[1].resources}
            assert {r.path for r in kept[0].resources} == set(info) and len(info) >= 10
            assert all(info[r.path] is r for r in kept[0].resources)

    run(scenario())


def test_device_id_is_stable_across_re_registrations(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "stable-1") as sim:
            first = sim.device_id
            await sim.register()
            assert sim.device_id == first
            assert node.lwm2m.stats.registrations == 2

    run(scenario())


def test_update_merges_a_delta_and_follows_the_new_source_port(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "upd-1") as sim:
            code = await sim.update([ResourceLink(path="/3303/1/5700")])
            assert code == codes.CHANGED
            registration = node.lwm2m.registration(sim.device_id or "")
            assert registration is not None
            assert "/3303/1/5700" in {link.path for link in registration.links}
            assert "/3/0/0" in {link.path for link in registration.links}  # the delta did not replace the rest

    run(scenario())


def test_update_for_an_unknown_registration_gets_404_and_the_client_registers_afresh(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "gone-1") as sim:
            sim.location = ["rd", "0" * 32, "f" * 32]
            code = await sim.update()
            assert code == codes.NOT_FOUND
            assert sim.registered.is_set() and sim.location[-1] != "f" * 32
            assert node.lwm2m.stats.registrations == 2

    run(scenario())


def test_deregister_marks_the_device_deregistered(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "dereg-1") as sim:
            device_id = sim.device_id or ""
            assert node.devices.router.tracked() == 1  # its routes (presubscriptions, here none) are in memory
            await sim.deregister()
            assert node.lwm2m.registration(device_id) is None
            stored = await node.store.get_device(device_id)
            assert stored is not None and stored.state == "deregistered"
            assert node.devices.router.tracked() == 0  # and gone with it: memory does not grow with departures

    run(scenario())


def test_registration_expires_when_the_clock_passes_lifetime_plus_grace(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node, device(node, "exp-1", lifetime=60) as sim:
            device_id = sim.device_id or ""
            await clock.advance(60 + 90)
            assert node.lwm2m.registration(device_id) is not None  # still inside the grace period
            await clock.advance(5)
            await eventually(lambda: node.lwm2m.stats.expirations == 1)  # counted once the expiry is handled
            assert node.lwm2m.registration(device_id) is None

    run(scenario())


def test_unsupported_lwm2m_version_gets_412(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            sim = SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), "v12")
            await sim.start(lifecycle=False)
            try:
                options = [(codes.URI_PATH, b"rd"), (codes.URI_QUERY, b"ep=v12"), (codes.URI_QUERY, b"lwm2m=1.2")]
                response = await sim.endpoint.request(("127.0.0.1", node.coap_port), codes.POST, options, b"</3/0>")
                assert response.code == codes.PRECONDITION_FAILED
            finally:
                await sim.stop(deregister=False)

    run(scenario())


def test_unknown_endpoint_is_refused_with_403_without_a_default_account(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, dev=False) as node:
            sim = SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), "stranger", flavor=OMA)
            await sim.start(lifecycle=False)
            try:
                with pytest.raises(DeviceError, match=r"4\.03"):
                    await sim.register()
                assert node.lwm2m.stats.refused == 1
            finally:
                await sim.stop(deregister=False)

    run(scenario())


def test_enrolled_endpoint_joins_its_account(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, dev=False) as node:
            account = await node.accounts.create_account("acme")
            await node.store.enroll(account.id, "enrolled-1")
            async with device(node, "enrolled-1") as sim:
                assert sim.location[1] == account.id

    run(scenario())


def test_malformed_datagrams_are_counted_and_do_not_stop_the_server(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                for garbage in (b"", b"\xff", b"\x40", b"\x4f\x01\x00\x01", b"\x40\x01\x00\x01\xff", bytes(range(256))):
                    raw.sendto(garbage, ("127.0.0.1", node.coap_port))
            await eventually(lambda: node.lwm2m.metrics()["coap_malformed"] >= 5)
            async with device(node, "after-garbage") as sim:
                assert sim.registered.is_set()

    run(scenario())


def test_full_registration_drops_resource_subscriptions_and_reapplies_presubscriptions(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "full-1", flavor="oma") as sim:
            device_id = sim.device_id or ""
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.put(
                    "/v2/subscriptions", json=[{"endpoint-name": "full-*", "resource-path": ["/3311/0/5850"]}]
                ) as r:
                    assert r.status == 202
                async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700") as r:
                    assert r.status == 202
                await eventually(lambda: {o.path for o in sim.observers.by_token.values()} == {"/3303/0/5700"})
                async with http.get(f"/v2/subscriptions/{device_id}") as r:
                    assert "/3303/0/5700" in await r.text()

                await sim.register()  # the device restarts: a full registration
                await eventually(lambda: {o.path for o in sim.observers.by_token.values()} == {"/3311/0/5850"})
                async with http.get(f"/v2/subscriptions/{device_id}") as r:
                    assert r.status in (200, 404)
                    assert "/3303/0/5700" not in await r.text()

    run(scenario())


def test_presubscription_is_applied_to_resources_an_update_adds(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, device(node, "grow-1", flavor="oma") as sim:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                rules = [{"endpoint-name": "grow-*", "resource-path": ["/3303/1/5700"]}]
                async with http.put("/v2/subscriptions", json=rules) as r:
                    assert r.status == 202
            assert sim.observers.by_token == {}
            sim.model.objects[3303][1] = {5700: Resource(5700, FLOAT, 5.0)}  # a second sensor appears
            assert await sim.update([ResourceLink(path="/3303/1")]) == codes.CHANGED
            await eventually(lambda: {o.path for o in sim.observers.by_token.values()} == {"/3303/1/5700"})

    run(scenario())
