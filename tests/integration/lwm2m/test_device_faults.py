"""Devices that fail mid-exchange (issue 14 #13), over real UDP with the project's simulator: one that vanishes
while a request is outstanding (the injected clock runs CoAP's retransmission window), and one that registers
afresh while it is observed."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from pathlib import Path
from typing import Any

import pytest

from devicehub._core import coap_encode_uint
from devicehub.clock import ManualClock, SystemClock
from devicehub.domain.device_results import DeviceReset
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.parameters import ACK_RANDOM_FACTOR, ACK_TIMEOUT, MAX_RETRANSMIT
from devicehub.sim.device import OMA, SimDevice
from devicehub.sim.objects import TEMPERATURE
from support.apps import websocket_app as app
from support.node import device, run, running_node
from support.waiting import eventually

RETRY = 1  # the application's retry count: one more attempt after the first


class Silent(asyncio.DatagramProtocol):
    """Where the device was: takes every datagram and answers none (the device is gone without a word)."""

    def __init__(self) -> None:
        self.mids: list[int] = []

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.mids.append(int.from_bytes(data[2:4], "big"))


def test_a_device_vanishing_mid_request_ends_it_504_after_the_retransmission_window_and_retries_once(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node, app(node) as (http, events):
            sim = SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), "vanish-1", flavor=OMA)
            await sim.start()
            await asyncio.wait_for(sim.registered.wait(), 10)
            device_id = sim.device_id or ""
            sock = sim.endpoint.datagram_socket.dup()  # its address, for the silent taker
            await sim.stop(deregister=False)  # no de-registration: the service still takes it for registered
            silent = Silent()
            transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(lambda: silent, sock=sock)
            try:
                started = clock.now()
                async with http.post(
                    f"/v2/device-requests/{device_id}?async-id=lost-1&retry={RETRY}",
                    json={"method": "GET", "uri": "/3/0/0"},
                ) as r:
                    assert r.status == 202
                answer = None
                while answer is None:  # move the clock a little at a time through the back-off
                    assert clock.now() - started < 600, "no async-response after 600 clock seconds"
                    await clock.advance(2)
                    with contextlib.suppress(TimeoutError):
                        answer = await events.wait_for("async-responses", lambda e: e["id"] == "lost-1", 0.02)
                assert (answer["status"], answer["error"]) == (504, "TIMEOUT")
                # RFC 7252 §4.8.2: each attempt waits MAX_TRANSMIT_WAIT-like back-off before giving up
                window = ACK_TIMEOUT * (2 ** (MAX_RETRANSMIT + 1) - 1)
                assert (RETRY + 1) * window <= clock.now() - started <= (RETRY + 1) * window * ACK_RANDOM_FACTOR + 4
                # every attempt is one message sent 1 + MAX_RETRANSMIT times, and there are RETRY + 1 attempts
                attempts = sorted(set(silent.mids))
                assert len(attempts) == RETRY + 1
                assert [silent.mids.count(mid) for mid in attempts] == [MAX_RETRANSMIT + 1] * (RETRY + 1)
                sent = len(silent.mids)
                for _ in range(100):  # 300 clock seconds, a little at a time: the service pings the app's socket
                    await clock.advance(3)  # on its clock, and the app answers while it reads
                    with contextlib.suppress(TimeoutError):
                        await events.wait_for("async-responses", lambda e: False, 0.02)
                assert len(silent.mids) == sent  # nothing more once the request ended
                assert await node.store.pending_requests(device_id) == []
                assert [e["id"] for e in events.events("async-responses")] == ["lost-1"]  # ended once
            finally:
                transport.close()
            # the service is healthy: another device is served at once
            async with http.get("/healthz") as r:
                assert r.status == 200
            async with device(node, "vanish-2", flavor=OMA) as other:
                async with http.post(
                    f"/v2/device-requests/{other.device_id}?async-id=ok-1", json={"method": "GET", "uri": "/3/0/0"}
                ) as r:
                    assert r.status == 202
                ok = None
                while ok is None:  # the service's WebSocket sender coalesces frames on its clock: move it
                    await clock.advance(0.01)
                    with contextlib.suppress(TimeoutError):
                        ok = await events.wait_for("async-responses", lambda e: e["id"] == "ok-1", 0.02)
                assert ok["status"] == 200

    run(scenario())


def _value(event: dict[str, str]) -> float:
    return float(base64.b64decode(event["payload"]))


def test_a_device_registering_afresh_mid_observe_is_observed_again_and_its_old_token_is_refused(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node, app(node) as (http, events):
            rules = [{"endpoint-name": "again-*", "resource-path": [TEMPERATURE]}]
            async with http.put("/v2/subscriptions", json=rules) as r:
                assert r.status == 202
            async with device(node, "again-1", flavor=OMA) as sim:
                await events.wait_for("notifications", lambda e: _value(e) == 21.5)  # the presubscription observes
                sim.set_value(TEMPERATURE, 30.5)
                await events.wait_for("notifications", lambda e: _value(e) == 30.5)
                [old] = [o for o in sim.observers.by_token.values() if o.path == TEMPERATURE]
                device_id = sim.device_id

                await sim.register()  # full registration mid-observe: the old observation ends on both sides
                assert sim.device_id == device_id
                await events.wait_for("registrations", lambda e: len(events.events("registrations")) == 2)
                await eventually(lambda: any(o.path == TEMPERATURE for o in sim.observers.by_token.values()))
                [new] = [o for o in sim.observers.by_token.values() if o.path == TEMPERATURE]
                assert new.token != old.token  # the presubscription was applied again, with a new token

                # the device keeps notifying on the old token: refused (RST), never delivered
                options = [(codes.OBSERVE, coap_encode_uint(old.seq + 1)), (codes.CONTENT_FORMAT, b"")]
                with pytest.raises(DeviceReset):
                    await sim.endpoint.send_notification(
                        sim.server, codes.CONTENT, old.token, options, b"77.5", confirmable=True
                    )
                sim.set_value(TEMPERATURE, 40.5)  # values keep flowing with the new registration
                await events.wait_for("notifications", lambda e: _value(e) == 40.5)
                values = [_value(e) for e in events.events("notifications")]
                assert 77.5 not in values
                assert values.count(40.5) == 1

    run(scenario())
