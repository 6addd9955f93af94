"""issue 34 #6: a WebSocket reader that stops reading gets back-pressure, not server memory growth.

The reader is a raw TCP socket that completes the upgrade handshake and then never reads (its receive buffer
set small). The server writes one batch at a time and waits for the transport to drain (aiohttp's writer limit),
so what it holds for the socket beyond the queue is one frame and the transport's high-water mark; the events
stay in the queue, under its byte cap, where they are counted and dropped by the spec's rules.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from pathlib import Path
from typing import Any

from channel_harness import run, serving

from devicehub.config import ServeSettings
from devicehub.domain.events import NotificationEvent

from channel_harness import LOOPBACK  # isort: skip
from support.waiting import eventually

FRAME_LIMIT = 256 * 1024  # max_batch_bytes: the largest frame
TRANSPORT_SLACK = 256 * 1024  # the transport's high-water mark and a frame's header, with room


def test_a_reader_that_stops_reading_leaves_the_events_in_the_queue(tmp_path: Path) -> None:
    settings = ServeSettings(
        data_dir=tmp_path / "data", flush_interval_ms=20, callback_allow=LOOPBACK, max_batch_bytes=FRAME_LIMIT
    )

    async def main() -> None:
        async with serving(tmp_path, settings=settings) as h:
            assert (await h.call("PUT", "/v2/notification/websocket"))[0] == 201
            loop = asyncio.get_running_loop()
            raw = socket.socket()
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # before connect: a small window
            raw.setblocking(False)
            host, port = h.base.removeprefix("http://").split(":")
            await loop.sock_connect(raw, (host, int(port)))
            key = base64.b64encode(os.urandom(16)).decode()
            handshake = (
                f"GET /v2/notification/websocket-connect HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Sec-WebSocket-Protocol: wss, pelion_{h.secret}\r\n\r\n"
            )
            await loop.sock_sendall(raw, handshake.encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += await loop.sock_recv(raw, 1)  # byte by byte: nothing past the handshake is read
            assert head.startswith(b"HTTP/1.1 101")
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.session is not None)

            payload = os.urandom(3000)
            total = 0
            for n in range(8000):  # about 32 MB of events, under the 50 MB cap
                event = NotificationEvent(
                    device_id="d" * 32, endpoint_name="n", path="/3303/0/5700", content_type="x", payload=payload
                )
                await h.hub.publish([h.key_id], event)
                total += len(payload)
                if n % 500 == 0:
                    await asyncio.sleep(0)  # let the sender run as it would between arrivals
            # the sender is stuck in the drain of a frame: the rest waits in the queue
            await eventually(lambda: channel.size > 0 and channel.in_flight)
            ws: Any = channel.session.ws if channel.session is not None else None
            assert ws is not None
            largest = 0
            for _ in range(40):  # watched over 0.2 s of the loop running: the transport buffer stays bounded
                largest = max(largest, ws._writer.transport.get_write_buffer_size())
                await asyncio.sleep(0.005)
            assert largest <= FRAME_LIMIT + TRANSPORT_SLACK, largest
            assert channel.queue.bytes_used >= total * 4 // 3 * 0.8  # (base64) nearly all of it is still queued
            assert channel.queue.dropped_overflow == 0
            raw.close()

    run(main(), timeout=60)
