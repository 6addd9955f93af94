"""Callback channels over real HTTP: verification, delivery, the spec §6 retry schedule, time-outs, free tier."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
from channel_harness import HANG, Harness, Receiver, note, payloads, run, serving

from devicehub.channels.channel import Channel
from support.ports import free_tcp_port
from support.waiting import eventually


async def register(h: Harness, receiver: Receiver, **body: object) -> Channel:
    status, text = await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url, **body})
    assert status == 204, text
    verification = await receiver.next()
    assert verification.body == b"{}"
    channel = h.hub.channel(h.key_id)
    assert channel is not None
    return channel


def test_registration_verifies_the_url_with_a_put_carrying_the_headers(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path) as h:
            status, _ = await h.call(
                "PUT",
                "/v2/notification/callback",
                json={
                    "url": receiver.url,
                    "headers": {"Authorization": "Bearer app-token"},
                    "serialization": {"max_chunk_size": "500", "cfg": {"include_timestamp": "true"}},
                },
            )
            assert status == 204
            verification = await receiver.next()
            assert (verification.method, verification.body) == ("PUT", b"{}")
            assert verification.headers["Authorization"] == "Bearer app-token"

            status, body = await h.call("GET", "/v2/notification/callback")
            shown = msgspec.json.decode(body)
            assert status == 200
            assert (shown["url"], shown["headers"]) == (receiver.url, {"Authorization": "Bearer app-token"})
            assert shown["serialization"]["max_chunk_size"] == 500
            assert shown["serialization"]["cfg"]["include_timestamp"] is True
            assert shown["queue_size"] == 0
            assert await h.call("GET", "/v2/notification/channel") == (200, b'{"delivery_mechanism":"CALLBACK"}')

            await h.hub.publish([h.key_id], note(7))
            delivery = await receiver.next()
            assert delivery.headers["Authorization"] == "Bearer app-token"  # spec §5 rule 5
            assert delivery.headers["Content-Type"] == "application/json"
            assert payloads(delivery.body) == [7]
            assert "timestamp" in msgspec.json.decode(delivery.body)["notifications"][0]

            assert (await h.call("DELETE", "/v2/notification/callback"))[0] == 204
            assert (await h.call("GET", "/v2/notification/callback"))[0] == 404
            assert (await h.call("DELETE", "/v2/notification/callback"))[0] == 404
            assert await h.store.get_channel(h.key_id) is None

    run(main())


def test_registration_fails_with_400_naming_what_the_url_answered(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(default=404) as receiver, serving(tmp_path) as h:
            assert await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}) == (
                400,
                b"CALLBACK_URL_ANSWERED_404",
            )
            dead = f"http://127.0.0.1:{free_tcp_port()}/cb"
            assert await h.call("PUT", "/v2/notification/callback", json={"url": dead}) == (
                400,
                b"CALLBACK_URL_UNREACHABLE",
            )
            assert (await h.call("GET", "/v2/notification/callback"))[0] == 404
            assert await h.store.get_channel(h.key_id) is None

    run(main())


def test_registration_without_an_answer_in_20_clock_seconds_fails(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(answers=[HANG]) as receiver, serving(tmp_path) as h:
            put = asyncio.create_task(h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))
            await receiver.next()
            await h.clock.advance(19.9)
            assert not put.done()
            await h.clock.advance(0.1)
            assert await put == (400, b"CALLBACK_URL_DID_NOT_ANSWER")

    run(main())


def test_bad_registration_bodies_are_400_and_store_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path) as h:
            too_long = {"url": receiver.url, "headers": {"X-Token": "t" * (400 - len(receiver.url))}}
            for body in (
                too_long,
                {"url": "ftp://example.com/cb"},
                {"url": receiver.url, "colour": 1, "serialization": {"max_chunk_size": 5}},
            ):
                assert (await h.call("PUT", "/v2/notification/callback", json=body))[0] == 400
            assert (await h.call("PUT", "/v2/notification/callback", data=b"{nope"))[0] == 400
            assert receiver.count == 0
            assert h.hub.channel(h.key_id) is None

    run(main())


def test_retry_waits_follow_the_spec_table_on_the_clock(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(answers=[200] + [500] * 9) as receiver, serving(tmp_path) as h:
            channel = await register(h, receiver)
            await h.hub.publish([h.key_id], note(1))
            await receiver.next()
            first_failure = h.clock.now()
            since_failure = 0.0
            # spec §6 rule 7: 1, 2, 4 … 64, then 120 s, counted from each failure
            for wait in (1, 2, 4, 8, 16, 32, 64, 120, 120):
                await eventually(lambda: channel.retry_at is not None)
                assert channel.retry_at == h.clock.now() + wait
                await h.clock.advance(wait - 0.5)
                assert receiver.requests.empty() and channel.retry_at is not None
                await h.clock.advance(0.5)
                attempt = await receiver.next()
                since_failure += wait
                assert h.clock.now() - first_failure == since_failure
                assert payloads(attempt.body) == [1]
            assert since_failure == 367  # the table's 9th retry
            await eventually(lambda: channel.size == 0)
            assert channel.consecutive_failures == 0 and channel.retry_at is None
            assert channel.last_delivery_at == h.clock.now()
            assert h.hub.metrics()["delivery_failures_total"] == 9

    run(main())


def test_events_batch_up_while_the_receiver_is_down_then_drain_in_order(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(answers=[200, 500]) as receiver, serving(tmp_path) as h:
            channel = await register(h, receiver, serialization={"max_chunk_size": 100})
            await h.hub.publish([h.key_id], note(1))
            assert payloads((await receiver.next()).body) == [1]
            await eventually(lambda: channel.retry_at is not None)
            for n in range(2, 251):
                await h.hub.publish([h.key_id], note(n))
            status, body = await h.call("GET", "/v2/notification/callback")
            assert status == 200
            assert msgspec.json.decode(body)["queue_size"] == 250
            assert msgspec.json.decode(body)["consecutive_failures"] == 1
            await h.clock.advance(1)
            batches = [payloads((await receiver.next()).body) for _ in range(3)]
            assert batches == [list(range(1, 101)), list(range(101, 201)), list(range(201, 251))]
            await eventually(lambda: channel.size == 0)

    run(main())


def test_204_is_accepted_as_success(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(answers=[200], default=204) as receiver, serving(tmp_path) as h:
            channel = await register(h, receiver)
            for n in (1, 2):
                await h.hub.publish([h.key_id], note(n))
                assert payloads((await receiver.next()).body) == [n]
                await eventually(lambda: channel.size == 0)
            assert channel.consecutive_failures == 0
            assert h.hub.metrics()["events_delivered_total"] == 2

    run(main())


def test_no_answer_within_20_clock_seconds_is_a_failure_and_retried(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(answers=[200, HANG]) as receiver, serving(tmp_path) as h:
            channel = await register(h, receiver)
            await h.hub.publish([h.key_id], note(1))
            await receiver.next()
            await h.clock.advance(19.9)
            assert channel.consecutive_failures == 0
            await h.clock.advance(0.1)
            await eventually(lambda: channel.retry_at is not None)
            assert channel.consecutive_failures == 1
            assert channel.retry_at == h.clock.now() + 1
            await h.clock.advance(1)
            assert payloads((await receiver.next()).body) == [1]
            await eventually(lambda: channel.size == 0)

    run(main())


def test_free_tier_sends_each_batch_once_then_the_next(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(answers=[200, 500]) as receiver, serving(tmp_path, tier="free") as h:
            channel = await register(h, receiver)
            assert channel.config.free_tier
            await h.hub.publish([h.key_id], note(1))
            assert payloads((await receiver.next()).body) == [1]
            await eventually(lambda: channel.dropped_failed == 1)
            assert channel.size == 0 and channel.retry_at is None
            await h.hub.publish([h.key_id], note(2))
            assert payloads((await receiver.next()).body) == [2]  # no clock move: no retry wait
            await eventually(lambda: channel.size == 0)
            status, body = await h.call("GET", "/v2/notification/callback")
            assert status == 200
            assert msgspec.json.decode(body)["dropped_failed"] == 1
            assert h.hub.metrics()["dropped_failed_total"] == 1

    run(main())


def test_delivery_failing_for_24_hours_removes_the_channel(tmp_path: Path) -> None:
    async def main() -> None:
        # the second attempt hangs; its time-out (here longer than a day) ends 24 h after the first failure
        async with Receiver(answers=[200, 500, HANG]) as receiver, serving(tmp_path, callback_timeout=86_399.0) as h:
            channel = await register(h, receiver)
            await h.hub.publish([h.key_id], note(1))
            await receiver.next()
            await eventually(lambda: channel.retry_at is not None)
            await h.clock.advance(1)
            await receiver.next()
            await h.clock.advance(86_399.0)
            await eventually(lambda: h.hub.channel(h.key_id) is None)
            assert (await h.call("GET", "/v2/notification/callback"))[0] == 404
            assert await h.store.get_channel(h.key_id) is None
            assert h.hub.metrics()["channels_removed_total"] == 1

    run(main())


def test_a_new_registration_replaces_the_url_and_keeps_the_queue(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(answers=[200], default=500) as down, Receiver() as up, serving(tmp_path) as h:
            channel = await register(h, down)
            await h.hub.publish([h.key_id], note(1))
            await down.next()
            await eventually(lambda: channel.retry_at is not None)
            await h.hub.publish([h.key_id], note(2))
            await register(h, up)
            assert payloads((await up.next()).body) == [1, 2]
            await eventually(lambda: channel.size == 0)
            assert channel.config.url == up.url

    run(main())
