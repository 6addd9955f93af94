"""The one injectable clock every timer reads (architecture.md, "Time")."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    """A callback scheduled on a clock; `cancel` before it ran keeps it from running."""

    def cancel(self) -> object: ...


class Clock(Protocol):
    """Wall-clock seconds and sleeping against them."""

    def now(self) -> float:
        """Seconds since the epoch."""

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` have passed on this clock."""

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """Run `callback` on the event loop once `seconds` have passed on this clock (no task: a timer per CoAP
        exchange is on the hot path)."""


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, seconds), callback)


class ManualClock:
    """A clock that moves only when told; sleepers wake when `advance` passes their deadline."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), future))
        await future

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """A sleeper whose wake-up runs `callback` (a cancelled one is skipped by `advance`)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: None if f.cancelled() else callback())
        heapq.heappush(self._sleepers, (self._now + max(0.0, seconds), next(self._order), future))
        return future

    @property
    def sleepers(self) -> int:
        """Sleepers still waiting (cancelled ones included until their deadline passes)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def next_deadline(self) -> float | None:
        live = [d for d, _, f in self._sleepers if not f.done()]
        return min(live) if live else None

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking each sleeper in deadline order and letting it run."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not future.done():
                future.set_result(None)
                for _ in range(5):  # let the woken task run up to its next await
                    await asyncio.sleep(0)
        self._now = target
        for _ in range(5):
            await asyncio.sleep(0)

    def jump(self, seconds: float) -> None:
        """Move time forward without waking sleepers one by one: for rules counted in months, where stepping
        through every periodic timer would take millions of wake-ups. Sleepers due meanwhile wake at the next
        `advance`."""
        self._now += seconds

    async def wait_for_sleepers(self, count: int = 1, timeout: float = 10.0) -> None:
        """Wait (in real time, bounded) until at least `count` tasks sleep on this clock."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self.sleepers < count:
            if loop.time() > end:
                raise TimeoutError(f"expected {count} sleepers, have {self.sleepers}")
            await asyncio.sleep(0.001)
