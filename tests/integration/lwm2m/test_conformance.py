"""Protocol corners real clients reach (issue 12 items 1, 2, 3, 7), on real UDP.

The devices are the simulator with the habit under test switched on (`OmaBehaviour`: Anjay's Observe numbers
restarting at 0, block-wise notifications, a small input buffer), or a raw socket replaying Wakaama's own
Register datagram (lwm2m-device-side.md §1) and answering the server byte by byte.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import aiohttp

from devicehub._core import CoapMessage, coap_decode, coap_encode, coap_encode_uint
from devicehub.lwm2m import codes
from devicehub.sim.device import OmaBehaviour
from devicehub.sim.objects import BATTERY, OPAQUE, TEMPERATURE, Resource, standard_model
from support.apps import websocket_app as app
from support.node import device, run, running_node, wait_reported
from support.raw_device import WAKAAMA_LINKS, WAKAAMA_REGISTER, raw_client, wakaama_registers
from support.waiting import eventually

OSCORE = 9  # a critical option (odd number) devicehub does not implement


async def device_request(http: aiohttp.ClientSession, device_id: str, async_id: str, body: dict[str, Any]) -> None:
    async with http.post(f"/v2/device-requests/{device_id}?async-id={async_id}", json=body) as r:
        assert r.status == 202, await r.text()


# ---- item 1: re-observing resets the stream -------------------------------------------------------------


def test_reobserve_with_the_same_token_takes_anjays_restarted_sequence(tmp_path: Path) -> None:
    async def scenario() -> None:
        anjay = OmaBehaviour(restart_observe_seq=True)
        async with running_node(tmp_path) as node, device(node, "anjay-1", flavor="oma", oma=anjay) as sim:
            device_id = sim.device_id or ""
            assert (await node.lwm2m.observe(device_id, TEMPERATURE)).observe == 0
            for n in range(1, 6):  # the first stream reaches Observe 5
                sim.set_value(TEMPERATURE, 20.5 + n)
                await wait_reported(node, device_id, TEMPERATURE, f"{20.5 + n}".encode())
            again = await node.lwm2m.observe(device_id, TEMPERATURE)
            assert again.observe == 0  # the new stream starts at 0 again
            sim.set_value(TEMPERATURE, 31.5)  # Observe 1 of the new stream, 4 "behind" the old one
            await wait_reported(node, device_id, TEMPERATURE, b"31.5")
            assert node.lwm2m.stats.stale_notifications == 0

    run(scenario())


def test_repeated_subscription_put_keeps_notifications_flowing(tmp_path: Path) -> None:
    async def scenario() -> None:
        anjay = OmaBehaviour(restart_observe_seq=True)
        async with (
            running_node(tmp_path) as node,
            device(node, "anjay-2", flavor="oma", oma=anjay) as sim,
            app(node) as (http, events),
        ):
            device_id = sim.device_id or ""
            for round_ in (1, 2):
                async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700") as r:
                    assert r.status == 202
                    async_id = (await r.json())["async-response-id"]
                assert (await events.wait_for("async-responses", lambda e, i=async_id: e["id"] == i))["status"] == 200
                if round_ == 2:
                    # the repeated PUT is answered from state (issue 15, test_repeated_subscribe.py); the service
                    # still observes again with the same token where it must (one under way, an ended stream):
                    # Anjay answers that with Observe 0 and counts up again
                    assert sim.log.observes == [TEMPERATURE]
                    assert (await node.lwm2m.observe(device_id, TEMPERATURE)).observe == 0
                assert sim.log.observes == [TEMPERATURE] * round_
                for n in range(3):
                    value = f"{round_ * 10 + n}.5"
                    sim.set_value(TEMPERATURE, float(value))
                    payload = base64.b64encode(value.encode()).decode()
                    await events.wait_for("notifications", lambda e, p=payload: e["payload"] == p)  # type: ignore[misc]
            assert node.lwm2m.stats.stale_notifications == 0

    run(scenario())


def test_registration_update_that_adds_nothing_does_not_observe_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        anjay = OmaBehaviour(restart_observe_seq=True)
        async with running_node(tmp_path) as node, device(node, "anjay-3", flavor="oma", oma=anjay) as sim:
            device_id = sim.device_id or ""
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                rules = [{"endpoint-name": "anjay-*", "resource-path": ["/3303/0/5700"]}]
                async with http.put("/v2/subscriptions", json=rules) as r:
                    assert r.status == 202
            assert await sim.update() == codes.CHANGED  # rules reach a device at its next update (spec §2.2)
            await eventually(lambda: sim.log.observes == [TEMPERATURE])
            await eventually(lambda: node.lwm2m.observed(device_id, TEMPERATURE))
            sim.set_value(TEMPERATURE, 40.5)
            await wait_reported(node, device_id, TEMPERATURE, b"40.5")
            for value in (41.5, 42.5):  # plain Updates, as Anjay sends them every lt/2
                assert await sim.update() == codes.CHANGED
                sim.set_value(TEMPERATURE, value)
                await wait_reported(node, device_id, TEMPERATURE, f"{value}".encode())
            assert sim.log.observes == [TEMPERATURE]
            assert node.lwm2m.stats.stale_notifications == 0

    run(scenario())


# ---- item 2: Observe through Block2 ------------------------------------------------------------------------


def test_block_wise_observe_answer_keeps_the_observation_and_notifications_are_completed(tmp_path: Path) -> None:
    async def scenario() -> None:
        small = OmaBehaviour(block_size=16)  # /3/0 in TLV is 54 bytes here: four blocks
        async with running_node(tmp_path) as node, device(node, "blocks-1", flavor="oma", oma=small) as sim:
            device_id = sim.device_id or ""
            response = await node.lwm2m.observe(device_id, "/3/0")
            assert (response.code, response.observe, response.content_format) == (codes.CONTENT, 0, 11542)
            assert response.payload == sim.model.read_tlv("/3/0") and len(response.payload) > 48
            assert node.lwm2m.observed(device_id, "/3/0")
            rest = [("/3/0", 1), ("/3/0", 2), ("/3/0", 3)]
            assert sim.log.block_reads == rest  # asked for without Observe
            sim.set_value(BATTERY, 57)  # notified as its first block only (RFC 7959 §3.4)
            await wait_reported(node, device_id, BATTERY, b"57")  # typed by the object model (issue 32 #1)
            assert sim.log.block_reads == rest * 2
            assert sim.log.observes == ["/3/0"]

    run(scenario())


# ---- item 3: outgoing Block1 -----------------------------------------------------------------------------------


def firmware_device_model(name: str) -> Any:
    model = standard_model(name, 300, lambda: 0.0)
    model.objects[5] = {0: {0: Resource(0, OPAQUE, b"", writable=True)}}  # Firmware Update: Package
    return model


def test_70_kb_write_goes_out_block_wise_at_the_size_the_device_asks_for(tmp_path: Path) -> None:
    async def scenario() -> None:
        # a 1024-byte block is too large for this client (4.13 with its Block1 size: start again at 512),
        # and its 2.31 answers ask for 256-byte blocks for the rest
        constrained = OmaBehaviour(block_size=256, max_payload=512)
        firmware = bytes(range(256)) * 280  # 71,680 bytes: more than one UDP datagram can carry
        async with (
            running_node(tmp_path) as node,
            device(node, "fw-1", flavor="oma", oma=constrained, model=firmware_device_model("fw-1")) as sim,
            app(node) as (http, events),
        ):
            device_id = sim.device_id or ""
            body = {"method": "PUT", "uri": "/5/0/0", "content-type": "application/octet-stream"}
            await device_request(http, device_id, "fw", {**body, "payload-b64": base64.b64encode(firmware).decode()})
            answer = await events.wait_for("async-responses", lambda e: e["id"] == "fw")
            assert answer["status"] == 200, answer
            assert sim.log.writes == [("/5/0/0", firmware)]
            # one refused 1024-byte block, two of 512, then 256-byte blocks
            assert sim.counters.requests == 1 and sim.endpoint.stats.received >= 1 + 2 + (len(firmware) - 1024) // 256

    run(scenario())


def test_write_refused_with_4_13_and_size1_is_sent_again_block_wise(tmp_path: Path) -> None:
    async def scenario() -> None:
        buffer = OmaBehaviour(max_payload=512)
        async with (
            running_node(tmp_path) as node,
            device(node, "fw-2", flavor="oma", oma=buffer, model=firmware_device_model("fw-2")) as sim,
        ):
            package = b"\xa5" * 900  # one datagram for the server, too much for the client's buffer
            response = await node.lwm2m.request(sim.device_id or "", "PUT", "/5/0/0", package, content_format=42)
            assert response.code == codes.CHANGED
            assert sim.log.writes == [("/5/0/0", package)]

    run(scenario())


# ---- item 7: codes and what cannot be processed ----------------------------------------------------------------

# CoAP answer → async-response status (wire-format.md; RFC 8075 §7 where the wire format names none)
ERROR_ANSWERS = {
    "4.02": (codes.BAD_OPTION, 400),
    "4.08": (codes.REQUEST_INCOMPLETE, 400),
    "4.09": (codes.CONFLICT, 409),
    "4.13": (codes.ENTITY_TOO_LARGE, 413),
    "4.15": (codes.UNSUPPORTED_FORMAT, 415),
    "5.01": (codes.NOT_IMPLEMENTED, 501),
    "5.02": (codes.BAD_GATEWAY, 502),
    "5.03": (codes.SERVICE_UNAVAILABLE, 503),
    "5.04": (codes.GATEWAY_TIMEOUT, 504),
}


def wakaama_answers(message: CoapMessage) -> bytes | None:
    """Answer `GET /3/0/<n>` with the n-th error code, `/3/1` with RST, `/3/2` with an unknown critical option."""
    segments = message.uri_path.strip("/").split("/")
    if segments[:2] == ["3", "0"]:
        code = list(ERROR_ANSWERS.values())[int(segments[2])][0]
        return coap_encode(codes.ACK, code, message.mid, message.token, [], b"")
    if segments == ["3", "1"]:
        return coap_encode(codes.RST, 0, message.mid, b"", [], b"")
    if segments == ["3", "2"]:
        options = [(OSCORE, b""), (codes.CONTENT_FORMAT, coap_encode_uint(0))]
        return coap_encode(codes.ACK, codes.CONTENT, message.mid, message.token, options, b"1")
    return None


def test_every_device_answer_maps_to_its_status_and_only_silence_is_a_timeout(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            running_node(tmp_path) as node,
            raw_client(node, wakaama_answers) as client,
            app(node) as (
                http,
                events,
            ),
        ):
            device_id = await wakaama_registers(client)
            for n, (dotted, (_code, status)) in enumerate(ERROR_ANSWERS.items()):
                await device_request(http, device_id, f"e{n}", {"method": "GET", "uri": f"/3/0/{n}"})
                answer = await events.wait_for("async-responses", lambda e, i=f"e{n}": e["id"] == i)  # type: ignore[misc]
                # a device's answer is its status alone; `error` is for what the service concluded (issue 11 §1)
                assert (answer["status"], answer.get("error")) == (status, None), dotted
            await device_request(http, device_id, "reset", {"method": "GET", "uri": "/3/1"})
            reset = await events.wait_for("async-responses", lambda e: e["id"] == "reset")
            assert (reset["status"], reset["error"]) == (502, "DEVICE_RESET")
            await device_request(http, device_id, "bad", {"method": "GET", "uri": "/3/2"})
            bad = await events.wait_for("async-responses", lambda e: e["id"] == "bad")
            assert (bad["status"], bad["error"]) == (502, "BAD_DEVICE_RESPONSE")  # §5.4.1: rejected, not 200

    run(scenario())


def test_a_request_through_a_proxy_gets_5_05_and_registers_nothing(tmp_path: Path) -> None:
    """RFC 7252 §5.7.2: a server that is no proxy answers a Proxy-Uri or Proxy-Scheme request 5.05."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node, raw_client(node) as client:
            register = coap_decode(WAKAAMA_REGISTER + WAKAAMA_LINKS)
            for mid, option in (
                (0x7001, (codes.PROXY_URI, b"coap://elsewhere/rd")),
                (0x7002, (codes.PROXY_SCHEME, b"coap")),
            ):
                proxied = coap_encode(
                    codes.CON, codes.POST, mid, register.token, [*register.options, option], register.payload
                )
                client.send(proxied)
                answer = coap_decode(await client.receive())
                assert (answer.mtype, answer.code, answer.mid) == (codes.ACK, codes.PROXYING_NOT_SUPPORTED, mid)
            assert node.lwm2m.stats.registrations == 0
            assert await wakaama_registers(client)

    run(scenario())


def test_unrecognised_critical_option_gets_4_02_and_a_malformed_con_gets_rst(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, raw_client(node) as client:
            register = coap_decode(WAKAAMA_REGISTER + WAKAAMA_LINKS)
            with_oscore = coap_encode(
                codes.CON, codes.POST, 0x6D9B, register.token, [*register.options, (OSCORE, b"")], register.payload
            )
            client.send(with_oscore)
            refused = coap_decode(await client.receive())
            assert (refused.mtype, refused.code, refused.mid, refused.token) == (
                codes.ACK,
                codes.BAD_OPTION,
                0x6D9B,
                register.token,
            )
            # Wakaama's datagram cut inside its "lwm2m=1.1" option: a format error (RFC 7252 §4.2)
            client.send(WAKAAMA_REGISTER[: WAKAAMA_REGISTER.index(b"lwm2m") + 3])
            assert await client.receive() == bytes.fromhex("70006d9a")  # RST, same message ID, nothing else
            assert node.lwm2m.stats.registrations == 0
            assert await wakaama_registers(client)  # the intact datagram still registers

    run(scenario())
