"""The simulator's /3/0/13 Current Time follows the injected clock (issue 11, item 14): it was fixed at start."""

from __future__ import annotations

import asyncio

from devicehub._core import coap_decode, coap_encode
from devicehub.clock import ManualClock
from devicehub.lwm2m import codes
from devicehub.sim.device import SimDevice


async def _read(device: SimDevice, path: str) -> bytes:
    request = coap_decode(coap_encode(codes.CON, codes.GET, 1, b"t", codes.path_options(path), b""))
    reply = await device._handle(request, b"", ("127.0.0.1", 5683))
    assert reply is not None and reply.code == codes.CONTENT
    return reply.payload


def test_current_time_advances_with_the_clock_and_a_write_sets_it() -> None:
    async def scenario() -> None:
        clock = ManualClock(start=1_800_000_000.0)
        device = SimDevice(clock, ("127.0.0.1", 5683), "sim-time")
        assert await _read(device, "/3/0/13") == b"1800000000"
        await clock.advance(61.5)
        assert await _read(device, "/3/0/13") == b"1800000061"
        write = coap_decode(coap_encode(codes.CON, codes.PUT, 2, b"u", codes.path_options("/3/0/13"), b"1900000000"))
        reply = await device._handle(write, b"1900000000", ("127.0.0.1", 5683))
        assert reply is not None and reply.code == codes.CHANGED
        await clock.advance(10)
        assert await _read(device, "/3/0/13") == b"1900000010"  # the device's clock runs on from what was written

    asyncio.run(scenario())
