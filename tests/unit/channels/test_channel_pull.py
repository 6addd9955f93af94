"""The long poll on the manual clock: answered at once, when an event arrives, or empty after the time-out."""

from __future__ import annotations

import asyncio

import pytest
from channel_fakes import START, make_channel

from devicehub.channels.pull import long_poll
from devicehub.clock import ManualClock
from devicehub.errors import Conflict

NOW_MS = int(START * 1000)


class Sent:
    def __init__(self, fail: bool = False) -> None:
        self.bodies: list[bytes] = []
        self.fail = fail

    async def __call__(self, body: bytes) -> None:
        if self.fail:
            raise ConnectionResetError("client gone")
        self.bodies.append(body)


def test_a_poll_with_nothing_queued_ends_empty_once_the_time_out_passes_on_the_clock() -> None:
    async def main() -> None:
        clock, channel, sent = ManualClock(), make_channel(kind="pull"), Sent()
        poll = asyncio.create_task(long_poll(channel, clock, 30.0, sent))
        await clock.wait_for_sleepers()
        await clock.advance(29.9)
        assert not poll.done()
        await clock.advance(0.1)
        assert await poll is False and sent.bodies == []
        assert not channel.polling and channel.last_polled_at == START + 30.0

    asyncio.run(main())


def test_queued_events_are_sent_at_once() -> None:
    async def main() -> None:
        clock, channel, sent = ManualClock(), make_channel(kind="pull"), Sent()
        channel.push(1, b'{"n":1}', NOW_MS)
        assert await long_poll(channel, clock, 30.0, sent) is True
        assert len(sent.bodies) == 1 and channel.size == 0 and clock.sleepers == 0

    asyncio.run(main())


def test_a_waiting_poll_sends_the_event_that_arrives() -> None:
    async def main() -> None:
        clock, channel, sent = ManualClock(), make_channel(kind="pull"), Sent()
        poll = asyncio.create_task(long_poll(channel, clock, 30.0, sent))
        await clock.wait_for_sleepers()
        channel.push(1, b'{"n":1}', NOW_MS)
        assert await poll is True and len(sent.bodies) == 1
        assert clock.sleepers == 0  # the time-out's sleeper went with the poll

    asyncio.run(main())


def test_a_second_poll_while_one_waits_is_a_conflict() -> None:
    async def main() -> None:
        clock, channel = ManualClock(), make_channel(kind="pull")
        poll = asyncio.create_task(long_poll(channel, clock, 30.0, Sent()))
        await clock.wait_for_sleepers()
        with pytest.raises(Conflict):
            await long_poll(channel, clock, 30.0, Sent())
        await clock.advance(30.0)
        assert await poll is False

    asyncio.run(main())


def test_a_batch_the_client_did_not_take_returns_to_the_queue() -> None:
    async def main() -> None:
        clock, channel = ManualClock(), make_channel(kind="pull")
        channel.push(1, b'{"n":1}', NOW_MS)
        with pytest.raises(ConnectionResetError):
            await long_poll(channel, clock, 30.0, Sent(fail=True))
        assert len(channel.queue) == 1 and not channel.polling

    asyncio.run(main())


def test_a_poll_whose_channel_is_interrupted_ends_empty_before_the_time_out() -> None:
    async def main() -> None:
        clock, channel = ManualClock(), make_channel(kind="pull")
        poll = asyncio.create_task(long_poll(channel, clock, 30.0, Sent()))
        await clock.wait_for_sleepers()
        channel.interrupt()  # a websocket replaces the channel
        assert await poll is False

    asyncio.run(main())
