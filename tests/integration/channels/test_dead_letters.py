"""issue 34 #5: every channel kind keeps dead letters, with or without cursors: the events the byte cap or the
lifetime took off its queue are listed by `GET /v2/notification/dead-letters` and queued again by
`POST /v2/notification/dead-letters/redrive`, over real sockets (a callback receiver, a WebSocket, a long poll)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import WSMsgType
from channel_harness import Harness, Receiver, note, payloads, run, serving

from support.waiting import eventually

CAP = 10 * 300  # room for about ten events: the cap takes the oldest while nothing is delivered


async def dead_letters(h: Harness) -> list[dict[str, Any]]:
    status, body = await h.call("GET", "/v2/notification/dead-letters")
    assert status == 200, body
    listed = msgspec.json.decode(body)
    assert listed["count"] == len(listed["dead_letters"])
    return list(listed["dead_letters"])


def values(letters: list[dict[str, Any]]) -> list[int]:
    return payloads(msgspec.json.encode({"notifications": [d["event"] for d in letters]}))


async def redrive(h: Harness, expected: int) -> None:
    status, answer = await h.call("POST", "/v2/notification/dead-letters/redrive")
    assert (status, msgspec.json.decode(answer)) == (202, {"redriven": expected})
    assert await dead_letters(h) == []


def test_a_plain_websocket_channel_lists_what_the_byte_cap_took_and_redrives_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path, queue_max_bytes=CAP) as h:
            assert (await h.call("PUT", "/v2/notification/websocket"))[0] == 201
            for n in range(1, 31):
                await h.hub.publish([h.key_id], note(n))
            letters = await dead_letters(h)
            dropped = len(letters)
            assert dropped > 0 and values(letters) == list(range(1, dropped + 1))  # the oldest, in queue order
            assert {(d["kind"], d["cause"]) for d in letters} == {("notifications", "byte_cap")}
            assert all("cursor" not in d for d in letters)  # a channel without cursors
            ws = await h.http.ws_connect(h.ws_url(), protocols=("wss", f"pelion_{h.secret}"))
            seen: list[int] = []
            while len(seen) < 30 - dropped:
                message = await ws.receive(timeout=5)
                assert message.type is WSMsgType.TEXT
                seen += payloads(str(message.data).encode())
            assert seen == list(range(dropped + 1, 31))
            await redrive(h, dropped)
            while len(seen) < 30:  # queued again at the tail, in their order
                message = await ws.receive(timeout=5)
                seen += payloads(str(message.data).encode())
            assert seen[30 - dropped :] == list(range(1, dropped + 1))
            await ws.close()

    run(main())


def test_a_callback_channel_without_cursors_keeps_what_the_cap_took_while_its_receiver_fails(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(default=503) as receiver, serving(tmp_path, queue_max_bytes=CAP) as h:
            receiver.answers = [200]  # the registration's verification PUT
            assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))[0] == 204
            await receiver.next()
            for n in range(1, 31):
                await h.hub.publish([h.key_id], note(n))
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.queue.dropped_overflow > 0)
            letters = await dead_letters(h)
            assert len(letters) == channel.queue.dropped_overflow
            assert {d["cause"] for d in letters} == {"byte_cap"}
            dead = values(letters)
            receiver.default = 200
            await redrive(h, len(dead))
            delivered: list[int] = []
            while not set(dead) <= set(delivered):
                request = await receiver.next()
                delivered += payloads(request.body)
            assert delivered[-len(dead) :] == dead  # after what the cap left, in their order

    run(main())


def test_a_pull_channel_lists_what_the_lifetime_took_and_the_next_poll_gets_it_after_a_redrive(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with serving(tmp_path, pull_timeout=0.05) as h:

            async def empty_poll() -> None:
                answer = asyncio.create_task(h.call("GET", "/v2/notification/pull"))
                await eventually(lambda: (c := h.hub.channel(h.key_id)) is not None and c.polling)
                await h.clock.advance(0.05)
                assert await answer == (204, b"")

            await empty_poll()  # the first GET creates the channel
            for n in range(1, 4):
                await h.hub.publish([h.key_id], note(n))
            await h.clock.advance(24 * 3600 + 1)
            await empty_poll()  # spec §8: events older than 24 hours leave the queue (before a batch is taken)
            letters = await dead_letters(h)
            assert [(d["kind"], d["cause"]) for d in letters] == [("notifications", "lifetime")] * 3
            assert values(letters) == [1, 2, 3]
            await redrive(h, 3)
            status, body = await h.call("GET", "/v2/notification/pull")
            assert status == 200 and payloads(body) == [1, 2, 3]

    run(main())
