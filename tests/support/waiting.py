"""Waiting on another process's state, which has no event to await: the condition is looked at again and again,
bounded (the async twin for in-process state is `support.node.eventually`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], *, within: float, what: str, every: float = 0.05) -> T:
    """`check()`'s first truthy answer; AssertionError naming `what` when none comes within `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {within:g} s (last: {answer!r})")
        time.sleep(every)
