"""Expiry on time among thousands of registrations (issue 16 #3), from the expiry heap, with a moved clock:
at each second exactly the registrations whose lifetime plus grace has passed are expired, never one early."""

from __future__ import annotations

import asyncio
from pathlib import Path

from devicehub._core import CoapMessage
from devicehub.clock import ManualClock
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from support.node import run, running_node
from support.waiting import eventually

DEVICES = 2000
LIFETIMES = 40  # lifetimes 60..99 s: forty expiry times, fifty devices each


async def _no_requests(message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
    return None


def test_registrations_in_a_heap_of_thousands_expire_each_on_its_second(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        # thousands of devices from one socket: the per-address CoAP rate limit is for real devices
        async with running_node(tmp_path, clock=clock, coap_rate_limit=0.0) as node:
            grace = node.settings.registration_grace
            client = await CoapEndpoint.bind("127.0.0.1", 0, clock, _no_requests)
            server = ("127.0.0.1", node.coap_port)
            try:
                start = clock.now()

                async def register(n: int) -> int:
                    options = [
                        (codes.URI_PATH, b"rd"),
                        (codes.URI_QUERY, f"ep=heap-{n}".encode()),
                        (codes.URI_QUERY, f"lt={60 + n % LIFETIMES}".encode()),
                    ]
                    return (await client.request(server, codes.POST, options, b"</3/0>")).code

                for chunk in range(0, DEVICES, 200):
                    answers = await asyncio.gather(*(register(n) for n in range(chunk, chunk + 200)))
                    assert set(answers) == {codes.CREATED}
                await node.lwm2m.flush()
                assert node.lwm2m.metrics()["lwm2m_registered_devices"] == DEVICES

                await clock.advance(60 + grace - 1)  # just before the first expiry time
                assert node.lwm2m.stats.expirations == 0
                for second in range(LIFETIMES + 1):
                    await clock.advance(1)
                    elapsed = clock.now() - start
                    due = sum(1 for n in range(DEVICES) if 60 + n % LIFETIMES + grace < elapsed)
                    await eventually(lambda due=due: node.lwm2m.stats.expirations >= due)  # type: ignore[misc]
                    assert node.lwm2m.stats.expirations == due, (second, due)  # on time, and none early
                    assert node.lwm2m.metrics()["lwm2m_registered_devices"] == DEVICES - due
                assert node.lwm2m.stats.expirations == DEVICES
            finally:
                await client.close()

    run(scenario(), timeout=60)
