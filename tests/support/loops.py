"""The event loops tests run on (issue 28 #2): uvloop, the loop `devicehub serve`, `simulate` and `edge` run on
(`uvloop.run` in cli.py, edge/runner.py, sim/fleet.py), for the whole suite; the stdlib's loop only where a test
compares the two on purpose.

A listener tested on the stdlib loop alone once passed while it failed every connection under `serve` (uvloop's
transports are not `asyncio.Transport` subclasses), so the suite's default loop is the product's: tests/conftest.py
calls `use_uvloop` once, and every `asyncio.run`, `asyncio.Runner` and `asyncio.new_event_loop` in a test or a
helper (support.node.run, support.live_node.LiveNode) makes a uvloop loop. tests/test_suite_event_loop.py fails if
that is ever dropped.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

import uvloop

T = TypeVar("T")


class SuiteLoop(uvloop.Loop):
    """uvloop's loop, whose `close` cannot hang a test that left a transport open.

    Closing, uvloop warns (ResourceWarning) of each handle still open and then closes it; the suite turns warnings
    into errors, so the warning raises inside uvloop's close-all walk, which swallows it before closing that
    handle, and the close waits forever on the handle left open (uvloop 0.23; pytest-timeout cannot interrupt it
    either). Here the warnings are held until every handle is closed, then raised: the test fails, naming what it
    left open."""

    def close(self) -> None:
        with warnings.catch_warnings(record=True) as unclosed:
            warnings.simplefilter("always", ResourceWarning)
            super().close()
        for warning in unclosed:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno, source=warning.source
            )


class SuitePolicy(uvloop.EventLoopPolicy):
    def new_event_loop(self) -> SuiteLoop:
        return SuiteLoop()


LoopKind = Literal["uvloop", "asyncio"]
FACTORIES: dict[LoopKind, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": SuiteLoop,
    "asyncio": asyncio.SelectorEventLoop,  # the stdlib's default loop on Linux
}


def use_uvloop() -> None:
    """Make uvloop the loop asyncio creates from now on in this process (the suite's policy)."""
    asyncio.set_event_loop_policy(SuitePolicy())


def run_on(kind: LoopKind, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end on a new loop of `kind`, whatever the suite's policy: for the tests that compare
    uvloop with the stdlib loop."""
    with asyncio.Runner(loop_factory=FACTORIES[kind]) as runner:
        return runner.run(coro)
