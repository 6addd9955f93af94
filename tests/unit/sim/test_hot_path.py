"""The notification hot path (issue 16 #4): a datagram encoded once per observation, patched per notification,
is the datagram the normal path sends; devices that cannot take it fall back to the normal path."""

from __future__ import annotations

import asyncio

import aiocoap
import pytest

from devicehub._core import coap_decode, coap_encode
from devicehub.clock import SystemClock
from devicehub.lwm2m import codes
from devicehub.sim.device import PELION, SimDevice
from devicehub.sim.objects import BATTERY, TEMPERATURE
from support.lwm2m_sink import CountingSink, start_sink
from support.node import run
from support.waiting import eventually


async def _registered(sink_address: tuple[str, int], flavor: str) -> SimDevice:
    device = SimDevice(SystemClock(), sink_address, f"hot-{flavor}", flavor=flavor)
    device.confirmable_notifications = False
    await device.start()
    await asyncio.wait_for(device.registered.wait(), 10)
    return device


async def _observe(sink: CountingSink, device: SimDevice, path: str, token: bytes) -> None:
    """The server's Observe request, sent from the sink's socket (the device's server address)."""
    assert sink.transport is not None and sink.kept is not None
    options = [(codes.OBSERVE, b"")] + [(codes.URI_PATH, part.encode()) for part in path.strip("/").split("/")]
    sink.transport.sendto(coap_encode(codes.CON, codes.GET, 7, token, options), device.address)
    await eventually(lambda: len(sink.kept or []) == 1)  # the piggy-backed 2.05 Observe 0
    sink.kept.clear()


async def _normal_then_hot(sink: CountingSink, device: SimDevice, path: str, value: float | int) -> tuple[bytes, bytes]:
    """The normal path's datagram for `value`, then the hot path's for the same value, message ID and Observe."""
    assert sink.kept is not None
    device.set_value(path, value)
    await eventually(lambda: len(sink.kept or []) == 1)
    normal = sink.kept.pop()
    sent = coap_decode(normal)
    device.endpoint._next_mid = (sent.mid - 1) & 0xFFFF
    observer = next(o for o in device.observers.by_token.values() if o.path == path)
    observer.seq = (sent.observe or 0) - 1
    assert device.hot_path.notify(device.clock.now(), 0.0)
    await eventually(lambda: len(sink.kept or []) == 1)
    return normal, sink.kept.pop()


@pytest.mark.parametrize(("flavor", "path", "value"), [(PELION, BATTERY, 57), ("oma", TEMPERATURE, 21.75)])
def test_pre_encoded_notification_is_the_datagram_of_the_normal_path(flavor: str, path: str, value: float) -> None:
    async def scenario() -> None:
        sink, address = await start_sink(keep=True)
        device = await _registered(address, flavor)
        try:
            if flavor == "oma":  # the server observes; the Pelion flavour's battery is auto-observed
                await _observe(sink, device, path, b"\x0a\x0b\x0c")
            normal, hot = await _normal_then_hot(sink, device, path, value)
            assert hot == normal
            ours = coap_decode(hot)
            assert (ours.mtype, ours.code, ours.payload) == (codes.NON, codes.CONTENT, str(value).encode())
            theirs = aiocoap.Message.decode(hot)
            before = aiocoap.Message.decode(normal)
            assert (theirs.mtype, theirs.code, theirs.mid, theirs.token) == (
                before.mtype,
                before.code,
                before.mid,
                before.token,
            )
            assert theirs.opt.observe == before.opt.observe == ours.observe
            assert theirs.opt.content_format == before.opt.content_format == 0
            assert theirs.payload == before.payload == str(value).encode()
            # the next notification moves on: a new message ID, the next Observe number
            assert device.hot_path.notify(device.clock.now(), 0.3)
            await eventually(lambda: len(sink.kept or []) == 1)
            following = coap_decode(sink.kept[0])
            assert following.mid == (ours.mid + 1) & 0xFFFF and following.observe == (ours.observe or 0) + 1
            assert following.payload != ours.payload  # the value moved
        finally:
            await device.stop()
            assert sink.transport is not None
            sink.transport.close()

    run(scenario())


def test_confirmable_notifications_and_attributes_take_the_normal_path() -> None:
    async def scenario() -> None:
        sink, address = await start_sink(keep=True)
        device = await _registered(address, PELION)
        try:
            device.confirmable_notifications = True
            device.hot_path.forget()
            assert not device.hot_path.notify(device.clock.now(), 0.5)  # CON waits for its ACK: normal path
            device.confirmable_notifications = False
            device.hot_path.forget()
            assert device.hot_path.notify(device.clock.now(), 0.5)
            device.responder.write_attributes(BATTERY, ["pmin=10"])  # attributes are judged on the normal path
            assert not device.hot_path.notify(device.clock.now(), 0.5)
            assert sink.kept is not None
            await eventually(lambda: len(sink.kept or []) == 1)
        finally:
            await device.stop()
            assert sink.transport is not None
            sink.transport.close()

    run(scenario())
