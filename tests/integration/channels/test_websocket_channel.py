"""WebSocket channels over real sockets: REST life cycle, delivery, every spec §7 close code, ping echo."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import aiohttp
import msgspec
from aiohttp import WSMsgType
from channel_harness import Harness, note, payloads, run, serving, ticking

from devicehub.config import ServeSettings
from devicehub.domain.events import DeregistrationEvent
from support.waiting import eventually


async def create(h: Harness, secret: str | None = None, body: object = None) -> tuple[int, dict[str, object]]:
    status, raw = await h.call("PUT", "/v2/notification/websocket", secret=secret, json=body)
    return status, msgspec.json.decode(raw)


async def connect(h: Harness, secret: str | None = None, *, autoping: bool = True) -> aiohttp.ClientWebSocketResponse:
    return await h.http.ws_connect(h.ws_url(), protocols=("wss", f"pelion_{secret or h.secret}"), autoping=autoping)


async def closed_with(ws: aiohttp.ClientWebSocketResponse) -> tuple[int | None, str]:
    """Read until the server's close frame; its code and reason."""
    while True:
        message = await ws.receive(timeout=5)
        if message.type is WSMsgType.CLOSE:
            await ws.close()
            return message.data, message.extra or ""
        if message.type in (WSMsgType.CLOSED, WSMsgType.ERROR):
            return ws.close_code, ""


async def frame(ws: aiohttp.ClientWebSocketResponse) -> bytes:
    message = await ws.receive(timeout=5)
    assert message.type is WSMsgType.TEXT, message
    return str(message.data).encode()


async def collect(ws: aiohttp.ClientWebSocketResponse, count: int) -> list[int]:
    """Notification values from as many frames as it takes to see `count` of them."""
    values: list[int] = []
    while len(values) < count:
        values += payloads(await frame(ws))
    return values


def test_websocket_channel_rest_life_cycle(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            assert (await h.call("GET", "/v2/notification/websocket"))[0] == 404
            status, body = await create(h, body={"serialization": {"max_chunk_size": 200}})
            assert status == 201
            assert (body["queue_size"], body["status"]) == (0, "disconnected")
            assert body["serialization"] == {
                "type": "v2",
                "max_chunk_size": 200,
                "cfg": {
                    "include_timestamp": False,
                    "include_uid": False,
                    "include_original_ep": False,
                    "deregistrations_as_object": False,
                    "use_endpoint_name": False,
                },
            }
            await h.hub.publish([h.key_id], note(1))  # spec §3.3: stores events at once
            status, body = await create(h)
            assert (status, body["queue_size"]) == (200, 1)
            assert body["serialization"]["max_chunk_size"] == 200  # type: ignore[index]
            status, raw = await h.call("GET", "/v2/notification/websocket")
            assert status == 200 and msgspec.json.decode(raw)["queue_size"] == 1
            assert await h.call("GET", "/v2/notification/channel") == (200, b'{"delivery_mechanism":"WEB_SOCKET"}')
            assert (await h.call("PUT", "/v2/notification/websocket", json={"serialization": {"type": "v3"}}))[0] == 400
            assert (await h.call("DELETE", "/v2/notification/websocket"))[0] == 204
            assert (await h.call("GET", "/v2/notification/websocket"))[0] == 404
            assert (await h.call("DELETE", "/v2/notification/websocket"))[0] == 404
            assert (await h.call("GET", "/v2/notification/channel"))[0] == 404

    run(main())


def test_queued_events_are_delivered_after_connect_then_live(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await create(h)
            for n in (1, 2, 3):
                await h.hub.publish([h.key_id], note(n))
            ws = await connect(h)
            assert ws.protocol == "wss"
            assert payloads(await frame(ws)) == [1, 2, 3]
            status, raw = await h.call("GET", "/v2/notification/websocket")
            assert status == 200
            assert msgspec.json.decode(raw)["status"] == "connected"
            await h.hub.publish([h.key_id], note(4))
            assert payloads(await frame(ws)) == [4]
            assert h.caller is not None
            gone = DeregistrationEvent(device_id="d" * 32, endpoint_name="node-1")
            await h.hub.publish_account(h.caller.account_id, gone)
            assert msgspec.json.decode(await frame(ws)) == {"de-registrations": ["d" * 32]}
            await ws.close()

    run(main())


def test_events_of_the_next_loop_turns_join_the_frame_of_the_first(tmp_path: Path) -> None:
    """issue 15: a sender woken by the first event of an empty queue waits `websocket_coalesce` (clock seconds)
    before it takes the batch, so the events published meanwhile go in the same frame (one NotificationMessage);
    a queue that is behind is sent at once. Without the wait, event 1 would go alone (see the second socket)."""

    async def main() -> None:
        for coalesce, frames in ((0.3, [[1, 2, 3]]), (0.0, [[1], [2, 3]])):
            async with serving(tmp_path / str(coalesce), websocket_coalesce=coalesce) as h:
                await create(h)
                ws = await connect(h)
                await eventually(lambda: h.hub.metrics()["websockets_connected"] == 1)
                sleepers = h.clock.sleepers
                await h.hub.publish([h.key_id], note(1))
                for _ in range(5):  # loop turns: the sender (coalesce 0) writes event 1 meanwhile
                    await asyncio.sleep(0)
                if coalesce:
                    assert h.clock.sleepers == sleepers + 1  # the sender waits on the clock, not in real time
                await h.hub.publish([h.key_id], note(2))
                await h.hub.publish([h.key_id], note(3))
                await h.clock.advance(coalesce)
                got = [payloads(await frame(ws)) for _ in frames]
                assert got == frames
                await ws.close()

    run(main())


def test_bearer_token_also_opens_the_socket(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await create(h)
            await h.hub.publish([h.key_id], note(5))
            ws = await h.http.ws_connect(h.ws_url(), headers=h.auth())
            assert payloads(await frame(ws)) == [5]
            await ws.close()

    run(main())


def test_client_close_is_answered_1000_and_events_keep_queueing(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await create(h)
            ws = await connect(h)
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.session is not None)
            await ws.close()
            assert ws.close_code == 1000
            await eventually(lambda: channel.session is None)
            await h.hub.publish([h.key_id], note(1))
            status, raw = await h.call("GET", "/v2/notification/websocket")
            assert status == 200
            assert msgspec.json.decode(raw)["status"] == "disconnected"
            assert msgspec.json.decode(raw)["queue_size"] == 1
            ws = await connect(h)
            assert payloads(await frame(ws)) == [1]
            await ws.close()

    run(main())


def test_bad_or_missing_key_closes_1008(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await create(h)
            ws = await connect(h, secret="ak_not_a_key")
            assert await closed_with(ws) == (1008, "invalid or missing API key")
            ws = await h.http.ws_connect(h.ws_url(), protocols=("wss",))
            assert (await closed_with(ws))[0] == 1008

    run(main())


def test_no_channel_closes_1011(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            ws = await connect(h)
            assert await closed_with(ws) == (1011, "no websocket channel for this key")

    run(main())


def test_second_socket_closes_the_first_with_1001(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await create(h)
            first = await connect(h)
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.session is not None)
            second = await connect(h)
            assert (await closed_with(first))[0] == 1001
            await h.hub.publish([h.key_id], note(9))
            assert payloads(await frame(second)) == [9]
            await second.close()

    run(main())


def test_rest_delete_closes_1001_and_drops_the_queue(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await create(h)
            ws = await connect(h)
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.session is not None)
            assert (await h.call("DELETE", "/v2/notification/websocket"))[0] == 204
            assert await closed_with(ws) == (1001, "channel deleted")
            await h.hub.publish([h.key_id], note(1))  # no channel: not stored
            assert h.hub.metrics()["events_queued_total"] == 0

    run(main())


def test_server_shutdown_closes_1001(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await create(h)
            ws = await connect(h)
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.session is not None)
            await h.hub.release_clients()
            assert await closed_with(ws) == (1001, "server shutting down")

    run(main())


def test_replacing_the_channel_by_a_callback_closes_the_socket_1001(tmp_path: Path) -> None:
    async def main() -> None:
        from channel_harness import Receiver

        async with Receiver() as receiver, serving(tmp_path) as h:
            await create(h)
            ws = await connect(h)
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.session is not None)
            await h.hub.publish([h.key_id], note(1))
            assert payloads(await frame(ws)) == [1]
            assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))[0] == 204
            assert await closed_with(ws) == (1001, "channel replaced")
            assert await h.call("GET", "/v2/notification/channel") == (200, b'{"delivery_mechanism":"CALLBACK"}')

    run(main())


def test_ping_timeout_closes_1001_when_the_client_does_not_answer(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path, ping_interval=0.05, pong_timeout=0.2) as h, ticking(h.clock):
            await create(h)
            ws = await connect(h, autoping=False)
            assert await closed_with(ws) == (1001, "ping timeout")

    run(main())


def test_a_pong_that_does_not_echo_the_ping_bytes_is_a_ping_timeout(tmp_path: Path) -> None:
    async def main() -> None:
        counter = itertools.count(1)
        async with (
            serving(
                tmp_path, ping_interval=0.05, pong_timeout=0.2, ping_payload=lambda: next(counter).to_bytes(4, "big")
            ) as h,
            ticking(h.clock),
        ):
            await create(h)
            ws = await connect(h, autoping=False)
            pings = 0
            while True:
                message = await ws.receive(timeout=5)
                if message.type is WSMsgType.PING:
                    pings += 1
                    await ws.pong(b"\xff\xff\xff\xff")
                    continue
                assert message.type is WSMsgType.CLOSE
                assert (message.data, message.extra) == (1001, "ping timeout")
                break
            assert pings >= 1
            await ws.close()

    run(main())


def test_pongs_echoing_the_injected_ping_bytes_keep_the_socket_open(tmp_path: Path) -> None:
    async def main() -> None:
        counter = itertools.count(1)
        async with (
            serving(
                tmp_path, ping_interval=0.02, pong_timeout=0.5, ping_payload=lambda: next(counter).to_bytes(4, "big")
            ) as h,
            ticking(h.clock),
        ):
            await create(h)
            ws = await connect(h, autoping=False)
            seen: list[bytes] = []
            while len(seen) < 4:
                message = await ws.receive(timeout=5)
                assert message.type is WSMsgType.PING, message
                seen.append(message.data)
                await ws.pong(message.data)
            assert seen == [n.to_bytes(4, "big") for n in (1, 2, 3, 4)]
            await h.hub.publish([h.key_id], note(1))
            while (message := await ws.receive(timeout=5)).type is WSMsgType.PING:
                await ws.pong(message.data)
            assert message.type is WSMsgType.TEXT and payloads(str(message.data).encode()) == [1]
            await ws.close()
            assert ws.close_code == 1000

    run(main())


def test_24_hours_of_inactivity_close_then_24_hours_without_reconnect_remove(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await create(h)
            ws = await connect(h)
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.session is not None)
            await h.clock.advance(24 * 3600 - 1)
            await h.hub.sweep()
            assert channel.session is not None
            await h.clock.advance(1)
            await h.hub.sweep()
            assert await closed_with(ws) == (1001, "inactivity")
            await eventually(lambda: channel.session is None)
            await h.hub.publish([h.key_id], note(1))  # spec §3.3: stored until the 24 h run out
            await h.clock.advance(24 * 3600 - 1)
            await h.hub.sweep()
            assert h.hub.channel(h.key_id) is channel and channel.size == 1
            await h.clock.advance(1)
            await h.hub.sweep()
            assert h.hub.channel(h.key_id) is None

    run(main())


def test_events_reach_only_their_keys_and_account_events_every_key_of_the_account(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            other_secret, other = await h.new_key()
            stranger_secret, stranger = await h.new_key("globex")
            for secret in (h.secret, other_secret, stranger_secret):
                await create(h, secret)
            mine, theirs, strangers = [await connect(h, s) for s in (h.secret, other_secret, stranger_secret)]
            await h.hub.publish([h.key_id], note(1))
            await h.hub.publish([other.key_id], note(2))
            await h.hub.publish_account(other.account_id, note(3))
            assert await collect(mine, 2) == [1, 3]
            assert await collect(theirs, 2) == [2, 3]
            await h.hub.publish_account(stranger.account_id, note(4))
            assert await collect(strangers, 1) == [4]  # the other account's events never reached it
            for ws in (mine, theirs, strangers):
                await ws.close()

    run(main())


def test_connect_without_upgrade_is_426_and_without_handshake_headers_400(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            assert await h.call("GET", "/v2/notification/websocket-connect") == (426, b"UPGRADE_REQUIRED")
            headers = {**h.auth(), "Upgrade": "websocket", "Connection": "Upgrade"}  # no Sec-WebSocket-Key
            async with h.http.get(h.base + "/v2/notification/websocket-connect", headers=headers) as response:
                assert response.status == 400

    run(main())


def test_a_large_backlog_drains_to_a_client_with_a_small_frame_limit(tmp_path: Path) -> None:
    """Issue 14.10: the queue went out as one frame, so a client with a frame limit got 1009 on every reconnect.

    A batch is bounded by `max_batch_bytes` as well as by its event count: a client whose frame limit is above
    that bound drains any backlog, in order, however large.
    """

    async def main() -> None:
        frame_limit = 64 * 1024
        settings = ServeSettings(data_dir=tmp_path / "data", flush_interval_ms=20, max_batch_bytes=frame_limit)
        async with serving(tmp_path, settings=settings) as h:
            assert (await create(h, body={"serialization": {"max_chunk_size": 20_000}}))[0] == 201
            for n in range(300):  # ~800 kB queued while no socket is open: twelve times the client's frame limit
                padded = msgspec.structs.replace(note(n), payload=str(n).zfill(2000).encode())
                await h.hub.publish([h.key_id], padded)
            ws = await h.http.ws_connect(h.ws_url(), protocols=("wss", f"pelion_{h.secret}"), max_msg_size=frame_limit)
            frames = 0
            values: list[int] = []
            while len(values) < 300:
                body = await frame(ws)  # a frame over the limit would arrive as an ERROR (1009), not TEXT
                assert len(body) <= frame_limit
                values += payloads(body)
                frames += 1
            assert values == list(range(300))
            assert frames > 1
            await ws.close()

    run(main())
