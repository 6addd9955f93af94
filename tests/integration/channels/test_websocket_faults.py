"""WebSocket clients that fail at the TCP level (issue 14 #13), over real sockets; the never-ponging and the
connect-twice clients are in test_websocket_channel.py."""

from __future__ import annotations

import asyncio
import base64
import socket
import struct
from pathlib import Path

import msgspec
from channel_harness import LOOPBACK, run, serving

from devicehub.config import ServeSettings
from devicehub.domain.events import NotificationEvent
from support.waiting import eventually

EVENTS = 400
PAD = 40_000  # each event's payload: its number padded to 40 kB, so the batch is a ~21 MB frame
HANDSHAKE = (
    "GET /v2/notification/websocket-connect HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
    "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    "Sec-WebSocket-Protocol: wss, pelion_{secret}\r\n\r\n"
)


def big(n: int) -> NotificationEvent:
    return NotificationEvent(
        device_id="d" * 32,
        endpoint_name="node-1",
        path="/3303/0/5700",
        content_type="text/plain",
        payload=f"{n};".ljust(PAD, "x").encode(),
    )


def numbers(frame: str) -> list[int]:
    """The event numbers of a NotificationMessage, in order."""
    notes = msgspec.json.decode(frame)["notifications"]
    return [int(base64.b64decode(item["payload"]).split(b";")[0]) for item in notes]


def test_a_client_dropping_mid_batch_loses_no_event_and_the_next_connection_gets_each_once_in_order(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        # one batch far larger than the loopback socket buffers, so its frame is still being written when the
        # client goes: the transport has not taken it, so it is not delivered (spec §6 rule 6)
        settings = ServeSettings(
            data_dir=tmp_path / "data", flush_interval_ms=20, callback_allow=LOOPBACK, max_batch_bytes=64 << 20
        )
        async with serving(tmp_path, settings=settings, queue_max_bytes=128 << 20) as h:
            assert (await h.call("PUT", "/v2/notification/websocket"))[0] == 201
            for n in range(EVENTS):
                await h.hub.publish([h.key_id], big(n))
            channel = h.hub.channel(h.key_id)
            assert channel is not None

            # a raw client with a small receive buffer: handshake, read the first 64 kB of the frame, then RST
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            host = h.base.removeprefix("http://")
            address, port = host.rsplit(":", 1)
            await asyncio.get_running_loop().sock_connect(sock, (address, int(port)))
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(HANDSHAKE.format(host=host, secret=h.secret).encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 101"), head
            first = await asyncio.wait_for(reader.readexactly(65_536), 5)
            assert first[0] == 0x81  # FIN + text: the one frame of the batch has started
            await eventually(lambda: channel.session is not None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # the TCP connection is reset mid-frame

            await eventually(lambda: channel.session is None)
            status, raw = await h.call("GET", "/v2/notification/websocket")
            assert status == 200
            assert msgspec.json.decode(raw)["queue_size"] == EVENTS  # the batch went back whole
            assert h.hub.metrics()["events_delivered_total"] == 0

            ws = await h.http.ws_connect(h.ws_url(), protocols=("wss", f"pelion_{h.secret}"), max_msg_size=0)
            values: list[int] = []
            while len(values) < EVENTS:
                message = await ws.receive(timeout=10)
                values += numbers(str(message.data))
            assert values == list(range(EVENTS))  # each event once, in order
            await eventually(lambda: h.hub.metrics()["events_delivered_total"] == EVENTS)
            await ws.close()

    run(main())
