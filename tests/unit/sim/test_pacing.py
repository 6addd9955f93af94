"""`simulate --register-rate`: devices are started at the rate asked for, even when sleeps overshoot."""

from __future__ import annotations

import asyncio

from devicehub.sim.fleet import at_rate

OVERSHOOT_S = 0.001  # uvloop's timers are millisecond-grained: a 1 ms sleep often takes 2


class OvershootingClock:
    """Time moves only by sleeping, and every sleep takes a millisecond longer than asked."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds) + OVERSHOOT_S
        await asyncio.sleep(0)


async def _start_times(per_second: float, count: int) -> list[float]:
    clock = OvershootingClock()
    return [clock.now() async for _ in at_rate(clock, per_second, range(count))]  # type: ignore[arg-type]


def test_the_offered_rate_holds_on_average_although_every_sleep_overshoots() -> None:
    times = asyncio.run(_start_times(1000.0, 1000))
    # 1 000 starts at 1 000/s: the last one is due at 0.999 s; a sleep's overshoot is made up by the next ones
    assert 0.999 <= times[-1] <= 0.999 + OVERSHOOT_S
    # and no item ever starts before its due time
    assert all(t >= i / 1000.0 - 1e-9 for i, t in enumerate(times))


def test_a_rate_of_zero_starts_everything_at_once() -> None:
    assert asyncio.run(_start_times(0.0, 50)) == [0.0] * 50


def test_every_start_is_within_one_overshoot_of_its_due_time() -> None:
    times = asyncio.run(_start_times(100.0, 10))
    for index, t in enumerate(times):
        assert index / 100.0 - 1e-9 <= t <= index / 100.0 + OVERSHOOT_S
