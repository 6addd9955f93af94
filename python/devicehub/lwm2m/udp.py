"""The plain CoAP/UDP listener's socket (issue 15 #2): datagrams come in by `recvmmsg`, one batch a loop turn.

uvloop's datagram transport makes one system call and one Python callback per datagram; here the socket's
readiness runs one `recvmmsg` (the Rust `UdpReceiver`, its buffers allocated once) that takes up to `batch`
waiting datagrams, and the endpoint gets them in one `datagrams_received` call: its per-datagram logic runs
for each, and what the endpoint sends in the turn (ACKs, answers, requests) leaves together in one `sendmmsg` at
its end. With an `ObserveLane` attached (the server's plain listener), the receive call itself recognises the
armed observations' notifications and hands their values (and the CON ones' ACKs, which leave with the turn's
other datagrams) to `lane_took`; only the rest reach `datagrams_received`. More than `batch` waiting stay for the
next turn (the poll is level-triggered), so one peer's flood cannot hold the loop.
The socket's errors (an ICMP port unreachable reported as ECONNREFUSED) go to `error_received`; reading goes on.
IP_RECVERR stays unset, so Linux does not report ICMP errors on this unconnected socket at all: with it, the socket
would poll as POLLERR, and libuv stops a poll handle (uvloop's `add_reader`) that reports POLLERR.
Linux only: elsewhere `open_udp` makes uvloop's (or asyncio's) ordinary transport, as before.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import socket
import sys
from typing import Any, Protocol

from devicehub._core import ObserveLane, UdpReceiver
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, LaneNotification
from devicehub.lwm2m.coap.parameters import MAX_DATAGRAM

RECV_BATCHES = sys.platform == "linux"  # recvmmsg(2) is Linux's
RECV_BATCH = 64  # datagrams one loop turn takes at most (64 KiB of buffer each, touched only as far as used)
# the socket's receive buffer asked for (the kernel caps it at net.core.rmem_max): a registration storm offered at
# 10 000/s overflowed the default 208 KiB (~20 ms of datagrams) whenever a loop turn ran long, 37 000 drops in a
# 20 000-device storm, each one a device waiting out its CoAP retransmission
RECEIVE_BUFFER = 4 * 1024 * 1024
MAX_BUFFERED = 4 << 20  # bytes waiting for a full send buffer to drain; beyond it a datagram is dropped


class BatchProtocol(Protocol):
    """What the transport feeds: a DatagramProtocol that also takes a loop turn's datagrams at once, and, when it
    has an `observe_lane`, the notifications the lane recognised in them (before the other datagrams)."""

    observe_lane: ObserveLane | None

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def datagrams_received(self, batch: list[tuple[bytes, Address]]) -> None: ...
    def error_received(self, exc: Exception) -> None: ...
    def now(self) -> float: ...
    def lane_took(
        self, values: list[LaneNotification], acks: list[tuple[bytes, Address]], counts: tuple[int, int, int]
    ) -> None: ...


class BatchedUdpTransport(asyncio.DatagramTransport):
    """A datagram transport on a bound, non-blocking UDP socket: batched reads, direct non-blocking sends (what
    would block waits in a bounded queue for the socket to be writable, in order)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: BatchProtocol, batch: int = RECV_BATCH
    ) -> None:
        super().__init__(extra={"socket": sock, "sockname": sock.getsockname()})
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        # one byte above the largest datagram accepted, so the endpoint recognises (and drops) a longer one
        self._receiver = UdpReceiver(batch, MAX_DATAGRAM + 1)
        self._pending: collections.deque[tuple[bytes, Any]] = collections.deque()
        self._pending_bytes = 0
        self._closing = False

    def start(self) -> None:
        self._protocol.connection_made(self)
        self._loop.add_reader(self._fd, self._read_ready)

    def _read_ready(self) -> None:
        protocol = self._protocol
        lane = protocol.observe_lane
        try:
            if lane is None:
                batch = self._receiver.receive(self._fd)
            else:
                batch, values, acks, counts = self._receiver.receive_sifting(self._fd, lane, protocol.now())
        except OSError as error:  # the socket's pending error, reported once; the next turn reads on
            protocol.error_received(error)
            return
        if lane is not None and counts[0]:
            protocol.lane_took(values, acks, counts)
        if batch:
            protocol.datagrams_received(batch)

    # ---- sending ------------------------------------------------------------------------------------
    def sendto(self, data: bytes | bytearray | memoryview, addr: Any = None) -> None:
        if self._closing or not data:
            return
        if not self._pending:
            try:
                self._sock.sendto(data, addr)
                return
            except (BlockingIOError, InterruptedError):
                self._loop.add_writer(self._fd, self._write_ready)
            except OSError as error:
                self._protocol.error_received(error)
                return
        if self._pending_bytes + len(data) > MAX_BUFFERED:
            self._protocol.error_received(OSError(errno.ENOBUFS, "send queue full: datagram dropped"))
            return
        self._pending.append((bytes(data), addr))
        self._pending_bytes += len(data)

    def _write_ready(self) -> None:
        while self._pending:
            data, addr = self._pending[0]
            try:
                self._sock.sendto(data, addr)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                self._protocol.error_received(error)
            self._pending.popleft()
            self._pending_bytes -= len(data)
        self._loop.remove_writer(self._fd)

    def get_write_buffer_size(self) -> int:
        return self._pending_bytes

    # ---- closing ------------------------------------------------------------------------------------
    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Stops reading at once; what still waits to be sent is dropped (UDP promises no delivery)."""
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._pending:
            self._loop.remove_writer(self._fd)
            self._pending.clear()
            self._pending_bytes = 0
        self._loop.call_soon(self._finish)

    def abort(self) -> None:
        self.close()

    def _finish(self) -> None:
        try:
            self._protocol.connection_lost(None)
        finally:
            self._sock.close()


def widen_receive_buffer(sock: socket.socket) -> None:
    """Ask for RECEIVE_BUFFER on a listening socket (a service's listeners, not the simulator's device sockets)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)


async def open_udp(endpoint: CoapEndpoint, host: str, port: int, *, batch: int = RECV_BATCH) -> None:
    """Bind a UDP socket on (host, port) under `endpoint`: batched reads on Linux, the loop's transport elsewhere;
    either way the replies of a loop turn go out together (`send_in_batches`)."""
    loop = asyncio.get_running_loop()
    if not RECV_BATCHES:
        transport, _ = await loop.create_datagram_endpoint(lambda: endpoint, local_addr=(host, port))
        widen_receive_buffer(transport.get_extra_info("socket"))
        endpoint.send_in_batches()
        return
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM, proto=socket.IPPROTO_UDP)
    failure: OSError = OSError(f"no address for {host}:{port}")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            widen_receive_buffer(sock)
            sock.bind(address)
        except OSError as error:
            sock.close()
            failure = error
            continue
        BatchedUdpTransport(loop, sock, endpoint, batch).start()
        endpoint.send_in_batches()
        return
    raise failure
