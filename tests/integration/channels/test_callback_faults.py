"""Callback receivers that misbehave at the TCP level or answer late (issue 14 #13), over real sockets; the
hanging, 500-for-24-hours and verification cases are in test_callback_channel.py."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

from channel_harness import Harness, Receiver, note, payloads, run, serving

from devicehub.channels.channel import Channel
from support.waiting import eventually


class ResettingReceiver:
    """Answers the verification, then resets (TCP RST) every connection once it has read a request head, until
    told to behave; then it answers 200 and records the bodies."""

    def __init__(self) -> None:
        self.resetting = True
        self.resets = 0
        self.bodies: asyncio.Queue[bytes] = asyncio.Queue()
        self._verified = False
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> ResettingReceiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/cb"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                if self._verified and self.resetting:
                    self.resets += 1
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                body = await reader.readexactly(length)
                if self._verified:
                    await self.bodies.put(body)
                self._verified = True
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


async def _register(h: Harness, url: str) -> Channel:
    status, text = await h.call("PUT", "/v2/notification/callback", json={"url": url})
    assert status == 204, text
    channel = h.hub.channel(h.key_id)
    assert channel is not None
    return channel


def test_a_receiver_that_resets_the_connection_is_a_failure_retried_with_the_events_kept(tmp_path: Path) -> None:
    async def main() -> None:
        receiver = await ResettingReceiver().start()
        try:
            async with serving(tmp_path) as h:
                channel = await _register(h, receiver.url)
                await h.hub.publish([h.key_id], note(1))
                await h.hub.publish([h.key_id], note(2))
                await eventually(lambda: channel.retry_at is not None)
                assert receiver.resets >= 1 and channel.consecutive_failures == 1
                assert channel.size == 2  # nothing lost to the reset
                receiver.resetting = False
                await h.clock.advance(1)  # spec §6: first retry 1 s after the failure
                body = await asyncio.wait_for(receiver.bodies.get(), 5)
                assert payloads(body) == [1, 2]
                await eventually(lambda: channel.size == 0)
                assert channel.consecutive_failures == 0
        finally:
            await receiver.stop()

    run(main())


class SlowReceiver(Receiver):
    """Answers each delivery after a real-time delay (the service's 20 s time-out runs on its clock, which stands)."""

    async def _handle(self, request):  # type: ignore[no-untyped-def]
        if self.count:  # the verification is answered at once
            await asyncio.sleep(0.3)
        return await super()._handle(request)


def test_a_slow_answer_within_the_time_out_is_a_success_sent_once(tmp_path: Path) -> None:
    async def main() -> None:
        async with SlowReceiver() as receiver, serving(tmp_path) as h:
            channel = await _register(h, receiver.url)
            await receiver.next()  # verification
            await h.hub.publish([h.key_id], note(1))
            assert payloads((await receiver.next()).body) == [1]
            await eventually(lambda: channel.size == 0)
            await h.hub.publish([h.key_id], note(2))
            assert payloads((await receiver.next()).body) == [2]
            await eventually(lambda: channel.size == 0)
            assert channel.consecutive_failures == 0 and receiver.count == 3  # no retry, no duplicate
            assert h.hub.metrics()["events_delivered_total"] == 2

    run(main())
