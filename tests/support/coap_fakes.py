"""Fakes of the CoAP layers' ports for their unit tests: a datagram transport that records what is sent."""

from __future__ import annotations

import asyncio
from typing import Any

from devicehub._core import CoapMessage, coap_decode
from devicehub.lwm2m.coap.messages import Address


class FakeDatagramTransport(asyncio.DatagramTransport):
    """Records each datagram sent; no socket, so the endpoint sends at once (no batching)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[bytes, Address]] = []
        self.closed = False

    def sendto(self, data: bytes | bytearray | memoryview, addr: Any = None) -> None:
        self.sent.append((bytes(data), addr))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def messages(self) -> list[CoapMessage]:
        return [coap_decode(data) for data, _ in self.sent]
