"""The deprecated pull channel (spec §4.8, wire-format.md): long poll 200/204, 409, 400, DELETE then 410."""

from __future__ import annotations

import asyncio
from pathlib import Path

from channel_harness import Harness, note, payloads, run, serving

from support.waiting import eventually


def polling(h: Harness) -> bool:
    channel = h.hub.channel(h.key_id)
    return channel is not None and channel.polling


async def poll(h: Harness, timeout: float) -> tuple[int, bytes]:
    """GET pull; while it waits, the clock moves on by the poll time-out (it runs on the hub's clock)."""
    answer = asyncio.create_task(h.call("GET", "/v2/notification/pull"))
    loop = asyncio.get_running_loop()
    end = loop.time() + 5
    while not answer.done():
        assert loop.time() < end, "the poll did not end"
        if polling(h):
            await h.clock.advance(timeout)
        await asyncio.sleep(0.001)
    return answer.result()


def test_pull_answers_at_once_when_events_wait_and_204_after_the_poll_time(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path, pull_timeout=0.2) as h:
            assert await poll(h, 0.2) == (204, b"")  # the first GET creates the channel
            assert await h.call("GET", "/v2/notification/channel") == (200, b'{"delivery_mechanism":"LONG_POLLING"}')
            for n in (1, 2):
                await h.hub.publish([h.key_id], note(n))
            status, body = await h.call("GET", "/v2/notification/pull")
            assert status == 200 and payloads(body) == [1, 2]
            assert await poll(h, 0.2) == (204, b"")

    run(main())


def test_events_published_together_arrive_in_their_order_and_keys_without_a_channel_are_skipped(
    tmp_path: Path,
) -> None:
    """`publish_many` (a loop turn's notifications, issue 15 #2) is `publish` of each, in order."""

    async def main() -> None:
        async with serving(tmp_path, pull_timeout=0.2) as h:
            assert await poll(h, 0.2) == (204, b"")
            nobody = "k" * 32
            await h.hub.publish_many([([h.key_id], note(1)), ([nobody], note(2)), ([nobody, h.key_id], note(3))])
            status, body = await h.call("GET", "/v2/notification/pull")
            assert status == 200 and payloads(body) == [1, 3]

    run(main())


def test_a_waiting_poll_gets_the_next_event_and_a_concurrent_poll_is_409(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path, pull_timeout=10.0) as h:
            waiting = asyncio.create_task(h.call("GET", "/v2/notification/pull"))
            await eventually(lambda: polling(h))
            assert await h.call("GET", "/v2/notification/pull") == (409, b"CONCURRENT_PULL_REQUEST_RECEIVED")
            await h.hub.publish([h.key_id], note(3))
            status, body = await waiting
            assert status == 200 and payloads(body) == [3]

    run(main())


def test_delete_answers_removed_then_get_is_410_for_a_while(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path, pull_timeout=0.05, pull_gone_s=60.0) as h:
            assert await h.call("DELETE", "/v2/notification/pull") == (200, b"ALREADY_DELETED")
            assert (await poll(h, 0.05))[0] == 204
            await h.hub.publish([h.key_id], note(1))
            assert await h.call("DELETE", "/v2/notification/pull") == (200, b"REMOVED")
            assert await h.call("GET", "/v2/notification/pull") == (410, b"CHANNEL_DELETED")
            assert await h.call("DELETE", "/v2/notification/pull") == (200, b"ALREADY_DELETED")
            await h.clock.advance(60)
            assert await poll(h, 0.05) == (204, b"")  # a new channel; the old queue is gone

    run(main())


def test_pull_is_400_while_another_channel_type_exists_and_delete_leaves_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            assert (await h.call("PUT", "/v2/notification/websocket"))[0] == 201
            assert (await h.call("GET", "/v2/notification/pull"))[0] == 400
            # wire-format.md: the SDK deletes the pull channel before registering another; that is a 2xx no-op
            assert await h.call("DELETE", "/v2/notification/pull") == (200, b"ALREADY_DELETED")
            assert (await h.call("GET", "/v2/notification/websocket"))[0] == 200

    run(main())


def test_a_waiting_poll_answers_204_when_a_websocket_replaces_the_channel(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path, pull_timeout=10.0) as h:
            await h.call("DELETE", "/v2/notification/pull")
            waiting = asyncio.create_task(h.call("GET", "/v2/notification/pull"))
            await eventually(lambda: polling(h))
            assert (await h.call("PUT", "/v2/notification/websocket"))[0] == 201
            assert await waiting == (204, b"")

    run(main())


def test_a_pull_channel_not_polled_for_10_minutes_is_removed(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path, pull_timeout=0.05) as h:
            await poll(h, 0.05)
            await h.clock.advance(599)
            await h.hub.sweep()
            assert h.hub.channel(h.key_id) is not None
            await h.clock.advance(1)
            await h.hub.sweep()
            assert h.hub.channel(h.key_id) is None

    run(main())
