"""The sweeper's time rules on the manual clock: removals and socket closes, with a fake of its remove port."""

from __future__ import annotations

import asyncio

from channel_fakes import START, FakeSession, Removals, make_channel

from devicehub.channels.registry import ChannelRegistry
from devicehub.channels.sweeper import Sweeper
from devicehub.clock import ManualClock


def sweeper(*channels_: object, interval: float = 60.0) -> tuple[Sweeper, ManualClock, Removals, ChannelRegistry]:
    clock, removals, registry = ManualClock(), Removals(), ChannelRegistry()
    for channel in channels_:
        registry.add(channel)  # type: ignore[arg-type]
    return Sweeper(registry, clock, removals, interval), clock, removals, registry


def test_a_pull_channel_unpolled_for_10_minutes_is_removed_by_the_running_sweeper() -> None:
    async def main() -> None:
        s, clock, removals, _ = sweeper(make_channel("k1", kind="pull"))
        s.start()
        await clock.wait_for_sleepers()
        await clock.advance(599.0)
        assert removals.removed == []
        await clock.advance(1.0)
        assert removals.removed == [("k1", "not polled for 10 minutes")]
        await s.stop()

    asyncio.run(main())


def test_a_pull_channel_with_a_waiting_poll_stays() -> None:
    async def main() -> None:
        channel = make_channel("k1", kind="pull")
        channel.polling = True
        s, clock, removals, _ = sweeper(channel)
        clock.jump(3600.0)
        channel.last_data_at = clock.now()
        await s.sweep()
        assert removals.removed == []

    asyncio.run(main())


def test_a_channel_without_data_for_48_hours_is_removed() -> None:
    async def main() -> None:
        s, clock, removals, _ = sweeper(make_channel("k1", kind="callback"))
        clock.jump(48 * 3600.0 - 1)
        await s.sweep()
        assert removals.removed == []
        clock.jump(1.0)
        await s.sweep()
        assert removals.removed == [("k1", "no data for 48 hours")]

    asyncio.run(main())


def test_a_websocket_not_reconnected_within_24_hours_is_removed() -> None:
    async def main() -> None:
        channel = make_channel("k1", kind="websocket")
        channel.disconnected_since = START
        s, clock, removals, _ = sweeper(channel)
        clock.jump(24 * 3600.0)
        await s.sweep()
        assert removals.removed == [("k1", "socket not reconnected within 24 hours")]

    asyncio.run(main())


def test_a_socket_inactive_for_24_hours_is_closed_1001_and_its_channel_kept() -> None:
    async def main() -> None:
        channel = make_channel("k1", kind="websocket")
        session = FakeSession(last_activity=START)
        channel.session = session
        s, clock, removals, _ = sweeper(channel)
        clock.jump(24 * 3600.0)
        channel.last_data_at = clock.now()
        await s.sweep()
        assert session.closed_with == (1001, "inactivity") and removals.removed == []

    asyncio.run(main())


def test_events_older_than_24_hours_expire_at_a_sweep() -> None:
    async def main() -> None:
        channel = make_channel("k1", kind="websocket")
        channel.push(1, b"{}", int(START * 1000))
        s, clock, _, _ = sweeper(channel)
        clock.jump(24 * 3600.0 + 1)
        await s.sweep()
        assert len(channel.queue) == 0 and channel.status().dropped_expired == 1

    asyncio.run(main())


def test_each_sweep_lets_the_pull_channels_forget_keys_whose_410_time_is_over() -> None:
    async def main() -> None:
        seen: list[float] = []
        clock, registry = ManualClock(), ChannelRegistry()
        s = Sweeper(registry, clock, Removals(), 60.0, forget_gone=seen.append)
        await s.sweep()
        assert seen == [START]

    asyncio.run(main())
