"""Send batching (issue 15 #2): the datagrams one loop turn sends leave together at its end, in one sendmmsg(2) on a
plain UDP socket (Linux), one `sendto` each otherwise, in the order they were sent."""

from __future__ import annotations

import asyncio
import sys
from typing import Any, cast

from devicehub._core import udp_send_batch
from devicehub.domain.device_results import EndpointClosed
from devicehub.lwm2m.coap.messages import Address, Stats

# sendmmsg(2) is Linux's: elsewhere the replies of a loop turn still go out together, one sendto each
SEND_BATCHES = sys.platform == "linux"
# datagrams a loop turn holds for its end at most: the one that fills the batch sends it at once, so a turn that
# sends a great many (a storm's answers, a simulator's notifications) keeps a bounded list and bounded latency
SEND_BATCH = 256


class SendBatch:
    """What this loop turn sends through one datagram transport, flushed at the turn's end (or when full)."""

    __slots__ = ("_due", "_pending", "_stats", "socket_fd", "transport")

    def __init__(self, stats: Stats) -> None:
        self._stats = stats
        self.transport: asyncio.DatagramTransport | None = None
        # the plain UDP socket's descriptor, once the owner says the transport is one: then sendmmsg on it
        self.socket_fd: int | None = None
        self._pending: list[tuple[bytes, Address]] = []
        self._due = False

    def add(self, data: bytes, remote: Address) -> None:
        if self.transport is None:
            raise EndpointClosed("endpoint closed")
        self._pending.append((data, remote))
        self._flush_later()

    def add_all(self, datagrams: list[tuple[bytes, Address]]) -> None:
        """`add` of each, in order."""
        if self.transport is None:
            raise EndpointClosed("endpoint closed")
        self._pending.extend(datagrams)
        self._flush_later()

    def _flush_later(self) -> None:
        if len(self._pending) >= SEND_BATCH:
            self.flush()
        elif not self._due:
            self._due = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._due = False
        pending, self._pending = self._pending, []
        transport = self.transport
        if transport is None or not pending:
            return  # closed meanwhile: as a sendto on a closed transport, nothing goes out
        sent = 0
        # with datagrams already queued in the transport (the socket would block), the fd would jump the queue;
        # the plain UDP transports (asyncio's, uvloop's) have get_write_buffer_size, typeshed's DatagramTransport not
        if self.socket_fd is not None and len(pending) > 1 and not cast(Any, transport).get_write_buffer_size():
            try:
                sent = udp_send_batch(self.socket_fd, pending)
                self._stats.sent_in_batches += sent
            except (OSError, ValueError):  # the first would block or failed, or a host the kernel call cannot take
                sent = 0
        # the rest one by one: the transport buffers what would block, and a failed one reaches error_received
        # (counted there) without costing those after it
        for data, remote in pending[sent:]:
            transport.sendto(data, remote)
        self._stats.sent += len(pending)
