"""The suite's one poll-until: a condition that no event announces is looked at again and again, bounded.

Two forms with one signature: `wait_until` blocks (another process's state: a port, a file, an HTTP answer),
`eventually` awaits (in-process state, or a check that itself awaits: a store read, an HTTP call). Either returns
the check's first answer that `accept` takes (truthy, unless told); past `within` seconds it fails with what was
awaited and the last answer seen.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

WITHIN_S = 5.0


def wait_until(
    check: Callable[[], T],
    *,
    accept: Callable[[T], object] = bool,
    within: float = WITHIN_S,
    what: str = "",
    every: float = 0.05,
) -> T:
    """`check()`'s first answer `accept` takes; AssertionError naming `what` when none comes within `within` s."""
    deadline = time.monotonic() + within
    while True:
        answer = check()
        if accept(answer):
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(_failure(check, within, what, answer))
        time.sleep(every)


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    *,
    accept: Callable[[T], object] = bool,
    within: float = WITHIN_S,
    what: str = "",
    every: float = 0.002,
) -> T:
    """`check()`'s first answer `accept` takes (awaited when it is awaitable), the loop running between looks;
    AssertionError naming `what` when none comes within `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        looked = check()
        answer: T = await looked if inspect.isawaitable(looked) else looked  # type: ignore[assignment]
        if accept(answer):
            return answer
        if loop.time() > deadline:
            raise AssertionError(_failure(check, within, what, answer))
        await asyncio.sleep(every)


def _failure(check: Callable[[], object], within: float, what: str, answer: object) -> str:
    return f"{what or _source(check)}: not reached within {within:g} s (last: {answer!r})"


def _source(check: Callable[[], object]) -> str:
    """What a check without a `what` waited for: its source line (a lambda's is the call), else its name."""
    try:
        return " ".join(inspect.getsource(check).split())[:200]
    except (OSError, TypeError):
        return getattr(check, "__qualname__", repr(check))
