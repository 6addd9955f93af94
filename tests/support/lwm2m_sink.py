"""A counting LwM2M server stand-in on one UDP socket: answers Register/Update/De-register and counts the
notifications it receives, so the simulator can be measured (bench/sim_bench.py) or watched (tests) alone."""

from __future__ import annotations

import asyncio
from typing import Any

from devicehub._core import coap_decode, coap_encode
from devicehub.lwm2m import codes

NOTIFICATION = 0x45  # 2.05 Content: what a notification carries


class CountingSink(asyncio.DatagramProtocol):
    """Registrations get 2.01 with Location-Path `rd/<n>`, updates 2.04, de-registrations 2.02; a notification is
    only counted (a CON one is acknowledged) and, with `keep`, kept as its datagram; with `counter` (a shared
    `multiprocessing.Value`), the count is also published there as it moves, for a process watching from outside,
    and with `registered` (another one) the count of registrations answered; with `goal` (a shared Value) and
    `reached` (a multiprocessing Event), `reached` is set once the count of registrations gets to a goal above 0."""

    def __init__(
        self, *, keep: bool = False, counter: Any = None, registered: Any = None, goal: Any = None, reached: Any = None
    ) -> None:
        self.notifications = 0
        self.counter = counter
        self.registered = registered
        self.goal, self.reached = goal, reached
        self.registrations = 0
        self.kept: list[bytes] | None = [] if keep else None
        self.transport: asyncio.DatagramTransport | None = None
        self.received = asyncio.Event()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if len(data) > 1 and data[1] == NOTIFICATION:
            self.notifications += 1
            if self.counter is not None:
                self.counter.value = self.notifications
            if self.kept is not None:
                self.kept.append(data)
                self.received.set()
            if data[0] >> 4 & 3 == codes.CON:
                self._send(coap_encode(codes.ACK, codes.EMPTY, int.from_bytes(data[2:4], "big"), b"", []), addr)
            return
        try:
            message = coap_decode(data)
        except ValueError:
            return
        if message.mtype != codes.CON:
            return
        path = message.uri_path.strip("/").split("/")
        if message.code == codes.POST and path == ["rd"]:
            self.registrations += 1
            if self.registered is not None:
                self.registered.value = self.registrations
            if self.reached is not None and 0 < self.goal.value <= self.registrations:
                self.reached.set()
            options = [(codes.LOCATION_PATH, b"rd"), (codes.LOCATION_PATH, str(self.registrations).encode())]
            reply = codes.CREATED
        elif message.code == codes.POST and path[0] == "rd":
            options, reply = [], codes.CHANGED
        elif message.code == codes.DELETE:
            options, reply = [], codes.DELETED
        else:
            options, reply = [], codes.NOT_FOUND
        self._send(coap_encode(codes.ACK, reply, message.mid, message.token, options), addr)

    def _send(self, data: bytes, addr: Any) -> None:
        if self.transport is not None:
            self.transport.sendto(data, addr)


async def start_sink(
    host: str = "127.0.0.1",
    *,
    keep: bool = False,
    counter: Any = None,
    registered: Any = None,
    goal: Any = None,
    reached: Any = None,
) -> tuple[CountingSink, tuple[str, int]]:
    """A sink on a free port; close it with `sink.transport.close()`."""
    loop = asyncio.get_running_loop()
    transport, sink = await loop.create_datagram_endpoint(
        lambda: CountingSink(keep=keep, counter=counter, registered=registered, goal=goal, reached=reached),
        local_addr=(host, 0),
    )
    host, port = transport.get_extra_info("sockname")[:2]
    return sink, (str(host), int(port))
