"""A device that is a bare UDP socket: it sends exact datagrams (real clients' bytes) and answers the server's
requests through a function, so a test controls every byte the service sees."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from devicehub._core import CoapMessage, coap_decode
from devicehub.lwm2m import codes
from devicehub.node import Node

# Wakaama's first datagram (lwm2m-device-side.md §1): CON POST /rd, MID 0x6d9a, token 9a6d2c69, CF 40,
# lwm2m=1.1, ep=X, b=U, lt=60; the link-format body is the example client's object list
WAKAAMA_REGISTER = bytes.fromhex("44026d9a9a6d2c69b272641128396c776d326d3d312e310465703d5803623d55056c743d3630ff")
WAKAAMA_LINKS = b'</>;rt="oma.lwm2m";ct=11543,</1/0>,</3/0>,</3303/0>'


class RawClient(asyncio.DatagramProtocol):
    """A UDP socket that sends exact datagrams and answers the server's requests through `answer`."""

    def __init__(self, answer: Callable[[CoapMessage], bytes | None] | None = None) -> None:
        self.answer = answer
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        message = coap_decode(data)
        if self.answer is not None and codes.is_request(message.code):
            reply = self.answer(message)
            if reply is not None and self.transport is not None:
                self.transport.sendto(reply)
            return
        self.inbox.put_nowait(data)

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.sendto(data)

    async def receive(self) -> bytes:
        return await asyncio.wait_for(self.inbox.get(), 5)


@contextlib.asynccontextmanager
async def raw_client(
    node: Node, answer: Callable[[CoapMessage], bytes | None] | None = None
) -> AsyncIterator[RawClient]:
    loop = asyncio.get_running_loop()
    transport, client = await loop.create_datagram_endpoint(
        lambda: RawClient(answer), remote_addr=("127.0.0.1", node.coap_port)
    )
    try:
        yield client
    finally:
        transport.close()


async def wakaama_registers(client: RawClient) -> str:
    """Send Wakaama's Register datagram; the device id is the last Location-Path of the 2.01."""
    client.send(WAKAAMA_REGISTER + WAKAAMA_LINKS)
    created = coap_decode(await client.receive())
    assert (created.mtype, created.code, created.mid, created.token) == (codes.ACK, codes.CREATED, 0x6D9A, b"\x9am,i")
    return created.location_path[-1]
