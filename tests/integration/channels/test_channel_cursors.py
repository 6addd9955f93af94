"""issue 34 #1, #2: cursors and per-device sequences, over real sockets on one node (SQLite).

An application that opts in (`serialization.cfg.include_cursor`) sees `"cursor"` on every event and on every
batch; coming back with `?cursor=N` (WebSocket, pull) or `POST …/callback/redrive {"from": N}` it gets exactly
the events after N, once each, in order; past retention the first batch says how many are `"lost"`.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from aiohttp import WSMsgType
from channel_harness import Harness, Receiver, note, payloads, run, serving, ticking

from devicehub.domain.events import DeregistrationEvent
from support.waiting import eventually

CURSORS = {"serialization": {"cfg": {"include_cursor": True}}}


def events_of(body: bytes) -> list[dict[str, Any]]:
    message = msgspec.json.decode(body)
    return [e for items in message.values() if isinstance(items, list) for e in items]


async def connect(h: Harness, cursor: int | None = None) -> aiohttp.ClientWebSocketResponse:
    url = h.ws_url() + (f"?cursor={cursor}" if cursor is not None else "")
    return await h.http.ws_connect(url, protocols=("wss", f"pelion_{h.secret}"))


async def read(ws: aiohttp.ClientWebSocketResponse, count: int) -> list[dict[str, Any]]:
    """Frames until `count` notifications came; checks each frame's top-level cursor is its last event's."""
    seen: list[dict[str, Any]] = []
    while len(seen) < count:
        message = await ws.receive(timeout=5)
        assert message.type is WSMsgType.TEXT, message
        body = msgspec.json.decode(str(message.data).encode())
        notes = body["notifications"]
        assert body["cursor"] == notes[-1]["cursor"]
        seen += [{**n, "lost": body.get("lost")} for n in notes]
    return seen


def values(events: list[dict[str, Any]]) -> list[int]:
    return payloads(msgspec.json.encode({"notifications": events}))


def test_a_websocket_resumes_after_its_cursor_with_each_missed_event_once_in_order(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            assert (await h.call("PUT", "/v2/notification/websocket", json=CURSORS))[0] == 201
            ws = await connect(h)
            for n in range(1, 11):
                await h.hub.publish([h.key_id], note(n, device="a" * 32 if n % 2 else "b" * 32))
            first = await read(ws, 10)
            assert [e["cursor"] for e in first] == list(range(1, 11))
            assert [e["device_seq"] for e in first] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
            await ws.close()

            # the application processed up to cursor 4 only; more events come while it is away
            for n in range(11, 16):
                await h.hub.publish([h.key_id], note(n, device="a" * 32))
            ws = await connect(h, cursor=4)
            again = await read(ws, 11)
            assert values(again) == list(range(5, 16))
            assert [e["cursor"] for e in again] == list(range(5, 16))
            assert all(e["lost"] is None for e in again)
            await h.hub.publish([h.key_id], note(16, device="b" * 32))
            (last,) = await read(ws, 1)
            assert (last["cursor"], last["device_seq"]) == (16, 6)
            await ws.close()

    run(main())


def test_a_resume_older_than_retention_says_how_many_were_lost(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            body = {"serialization": {"retention_s": 60, "cfg": {"include_cursor": True}}}
            assert (await h.call("PUT", "/v2/notification/websocket", json=body))[0] == 201
            ws = await connect(h)
            for n in range(1, 6):
                await h.hub.publish([h.key_id], note(n))
            await read(ws, 5)
            await h.clock.advance(61.0)  # events 1…5 were delivered and are past the 60 s retention
            for n in range(6, 9):
                await h.hub.publish([h.key_id], note(n))
            await read(ws, 3)
            await ws.close()

            ws = await connect(h, cursor=2)
            again = await read(ws, 3)
            assert values(again) == [6, 7, 8]
            assert again[0]["lost"] == 3  # cursors 3, 4 and 5 are gone
            await ws.close()

    run(main())


def test_pull_with_a_cursor_opts_in_and_replays(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path, pull_timeout=30.0) as h:
            waiting = asyncio.create_task(h.call("GET", "/v2/notification/pull?cursor=0"))  # makes it, with cursors
            await eventually(lambda: (c := h.hub.channel(h.key_id)) is not None and c.polling)
            await h.hub.publish_many([([h.key_id], note(n)) for n in range(1, 4)])
            status, body = await waiting
            assert status == 200
            message = msgspec.json.decode(body)
            assert [e["cursor"] for e in message["notifications"]] == [1, 2, 3]
            assert message["cursor"] == 3
            status, body = await h.call("GET", "/v2/notification/pull?cursor=1")
            assert status == 200 and payloads(body) == [2, 3]
            assert (await h.call("GET", "/v2/notification/pull?cursor=x"))[0] == 400

    run(main())


def test_a_callback_redrive_delivers_again_from_the_cursor(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path) as h:
            body = {"url": receiver.url, **CURSORS}
            assert (await h.call("PUT", "/v2/notification/callback", json=body))[0] == 204
            await receiver.next()
            await h.hub.publish_many([([h.key_id], note(n)) for n in range(1, 5)])
            got: list[int] = []
            while len(got) < 4:
                got += payloads((await receiver.next()).body)
            assert got == [1, 2, 3, 4]
            status, answer = await h.call("POST", "/v2/notification/callback/redrive", json={"from": 2})
            assert (status, msgspec.json.decode(answer)) == (202, {"lost": 0})
            again = await receiver.next()
            assert payloads(again.body) == [3, 4]
            assert msgspec.json.decode(again.body)["cursor"] == 4
            assert (await h.call("POST", "/v2/notification/callback/redrive", json={"from": -1}))[0] == 400

    run(main())


def test_without_the_option_nothing_changes_and_a_cursor_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path) as h:
            assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))[0] == 204
            await receiver.next()
            await h.hub.publish([h.key_id], note(1))
            assert h.caller is not None
            await h.hub.publish_account(h.caller.account_id, DeregistrationEvent(device_id="d", endpoint_name="n"))
            bodies = [msgspec.json.decode((await receiver.next()).body)]
            while sum(len(v) for b in bodies for v in b.values()) < 2:
                bodies.append(msgspec.json.decode((await receiver.next()).body))
            assert all("cursor" not in b for b in bodies)
            assert all("cursor" not in e for b in bodies for v in b.values() for e in v if isinstance(e, dict))
            assert ["d"] in [b.get("de-registrations") for b in bodies]  # still the spec's plain string
            status, text = await h.call("POST", "/v2/notification/callback/redrive", json={"from": 0})
            assert (status, text) == (400, b"CURSORS_NOT_ENABLED")

    run(main())


def test_cursors_and_retained_events_survive_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            assert (await h.call("PUT", "/v2/notification/websocket", json=CURSORS))[0] == 201
            ws = await connect(h)
            for n in range(1, 6):
                await h.hub.publish([h.key_id], note(n))
            await read(ws, 5)
            await ws.close()
            for n in range(6, 8):
                await h.hub.publish([h.key_id], note(n))
            secret, caller = h.secret, h.caller
        async with serving(tmp_path) as h:
            h.secret, h.caller = secret, caller  # the first run's key and its channel
            ws = await connect(h, cursor=3)
            again = await read(ws, 4)
            assert [e["cursor"] for e in again] == [4, 5, 6, 7]
            assert [e["device_seq"] for e in again] == [4, 5, 6, 7]
            await h.hub.publish([h.key_id], note(8))
            (new,) = await read(ws, 1)
            assert (new["cursor"], new["device_seq"]) == (8, 8)  # both go on from where they were
            await ws.close()

    run(main())


def test_per_device_order_holds_under_concurrent_load_on_every_channel_kind(tmp_path: Path) -> None:
    """200 devices send 10 events each from concurrent tasks in a random interleaving: each device's events
    arrive in the order the service received them, with device_seq 1…10 and no gap, on each channel kind."""
    devices = [f"{i:032x}" for i in range(200)]

    async def load(h: Harness) -> dict[str, list[int]]:
        sent: dict[str, list[int]] = {d: [] for d in devices}

        async def device(d: str) -> None:
            for n in range(10):
                await asyncio.sleep(random.random() / 1000)
                sent[d].append(n)
                await h.hub.publish([h.key_id], note(n, device=d))

        await asyncio.gather(*(device(d) for d in devices))
        return sent

    def check(received: list[dict[str, Any]]) -> None:
        assert [e["cursor"] for e in received] == list(range(1, len(received) + 1))
        per_device: dict[str, list[tuple[int, int]]] = {}
        for e, value in zip(received, values(received), strict=True):
            per_device.setdefault(e["ep"], []).append((e["device_seq"], value))
        assert len(per_device) == 200
        for seen in per_device.values():
            assert seen == [(n + 1, n) for n in range(10)]

    async def main() -> None:
        async with serving(tmp_path / "ws") as h:
            assert (await h.call("PUT", "/v2/notification/websocket", json=CURSORS))[0] == 201
            ws = await connect(h)
            loading = asyncio.create_task(load(h))
            received = await read(ws, 2000)
            await loading
            check(received)
            await ws.close()
        async with Receiver() as receiver, serving(tmp_path / "cb") as h:
            assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url, **CURSORS}))[0] == 204
            await receiver.next()
            await load(h)
            received = []
            while len(received) < 2000:
                received += events_of((await receiver.next()).body)
            check(received)
        async with serving(tmp_path / "pull", pull_timeout=0.5) as h, ticking(h.clock):
            assert (await h.call("GET", "/v2/notification/pull?cursor=0"))[0] == 204
            loading = asyncio.create_task(load(h))
            received = []
            while len(received) < 2000:
                status, body = await h.call("GET", "/v2/notification/pull")
                if status == 200:
                    received += events_of(body)
            await loading
            check(received)

    run(main(), timeout=90)


def test_opting_in_and_out_with_events_queued_keeps_every_event_once(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            assert (await h.call("PUT", "/v2/notification/websocket"))[0] == 201
            for n in range(1, 4):
                await h.hub.publish([h.key_id], note(n))  # queued while no socket is connected, without cursors
            assert (await h.call("PUT", "/v2/notification/websocket", json=CURSORS))[0] == 200
            await h.hub.publish([h.key_id], note(4))
            ws = await connect(h)
            first = await read(ws, 4)
            assert values(first) == [1, 2, 3, 4]
            assert [e.get("cursor") for e in first] == [None, None, None, 4]  # numbered 1…3, encoded before
            await ws.close()
            ws = await connect(h, cursor=1)
            assert values(await read(ws, 3)) == [2, 3, 4]
            await ws.close()

            off = {"serialization": {"cfg": {"include_cursor": False}}}
            assert (await h.call("PUT", "/v2/notification/websocket", json=off))[0] == 200
            await h.hub.publish([h.key_id], note(5))
            secret, caller = h.secret, h.caller
        async with serving(tmp_path) as h:
            h.secret, h.caller = secret, caller
            ws = await connect(h)
            message = await ws.receive(timeout=5)
            assert payloads(str(message.data).encode()) == [5]  # only the undelivered event, after a restart
            await ws.close()

    run(main())


def test_a_journal_kept_with_cursors_restored_without_them_does_not_deliver_again(tmp_path: Path) -> None:
    """The options changed while no process held the channel (in Redis mode: on another node): the journal holds
    delivered events kept for resumes, and they must not come back as new ones."""

    async def main() -> None:
        async with serving(tmp_path) as h:
            assert (await h.call("PUT", "/v2/notification/websocket", json=CURSORS))[0] == 201
            ws = await connect(h)
            for n in range(1, 4):
                await h.hub.publish([h.key_id], note(n))
            await read(ws, 3)
            await ws.close()
            await h.hub.publish([h.key_id], note(4))
            secret, caller = h.secret, h.caller
            config = await h.store.get_channel(h.key_id)
            assert config is not None
        plain = msgspec.structs.replace(config, serialization={"type": "v2", "max_chunk_size": 10000, "cfg": {}})
        async with serving(tmp_path) as h:
            await h.store.put_channel(plain)
        async with serving(tmp_path) as h:
            h.secret, h.caller = secret, caller
            ws = await connect(h)
            message = await ws.receive(timeout=5)
            assert payloads(str(message.data).encode()) == [4]
            await ws.close()

    run(main())


def test_events_the_byte_cap_took_are_listed_as_dead_letters(tmp_path: Path) -> None:
    async def main() -> None:
        # room for about 10 events: the byte cap takes the oldest while no socket reads
        async with serving(tmp_path, queue_max_bytes=10 * 300) as h:
            assert (await h.call("PUT", "/v2/notification/websocket", json=CURSORS))[0] == 201
            for n in range(1, 31):
                await h.hub.publish([h.key_id], note(n))
            status, body = await h.call("GET", "/v2/notification/dead-letters")
            assert status == 200
            listed = msgspec.json.decode(body)
            dead = [d["cursor"] for d in listed["dead_letters"]]
            assert listed["count"] == len(dead) > 0
            first, last = dead[0], dead[-1]  # the newest of those the cap took that are still retained
            assert dead == list(range(first, last + 1))
            channel = h.hub.channel(h.key_id)
            assert channel is not None and channel.queue.dropped_overflow == last
            assert {d["cause"] for d in listed["dead_letters"]} == {"byte_cap"}
            assert values([d["event"] for d in listed["dead_letters"]]) == dead
            ws = await connect(h)
            assert values(await read(ws, 30 - last)) == list(range(last + 1, 31))  # what the cap left
            await ws.close()

    run(main())


def test_dead_letters_of_the_lifetime_are_redriven_as_new_events(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            body = {"serialization": {"retention_s": 604_800, "cfg": {"include_cursor": True}}}
            assert (await h.call("PUT", "/v2/notification/websocket", json=body))[0] == 201
            for n in range(1, 6):
                await h.hub.publish([h.key_id], note(n))
            await h.clock.advance(24 * 3600 + 1)
            await h.hub.sweep()  # spec §8: events older than 24 hours leave the queue
            listed = msgspec.json.decode((await h.call("GET", "/v2/notification/dead-letters"))[1])
            assert [(d["cursor"], d["cause"]) for d in listed["dead_letters"]] == [(n, "lifetime") for n in range(1, 6)]
            for n in range(6, 9):
                await h.hub.publish([h.key_id], note(n))
            ws = await connect(h)
            assert values(await read(ws, 3)) == [6, 7, 8]
            status, answer = await h.call("POST", "/v2/notification/dead-letters/redrive")
            assert (status, msgspec.json.decode(answer)) == (202, {"redriven": 5})
            again = await read(ws, 5)  # queued again at the tail, each with a new cursor
            assert values(again) == [1, 2, 3, 4, 5]
            assert [e["cursor"] for e in again] == [9, 10, 11, 12, 13]
            assert [e["device_seq"] for e in again] == [1, 2, 3, 4, 5]  # where each stands among its device's
            await ws.close()
            assert msgspec.json.decode((await h.call("GET", "/v2/notification/dead-letters"))[1])["count"] == 0

    run(main())
