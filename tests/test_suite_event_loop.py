"""The suite runs on the event loop the product runs on (issue 28 #2): uvloop, set by tests/conftest.py for every
`asyncio.run`, helper and thread loop; the stdlib loop only where a test asks for it to compare (support/loops.py).
If the policy is ever dropped, these fail, not a deployment."""

from __future__ import annotations

import asyncio

import uvloop

from support.loops import run_on
from support.node import run


async def loop_kind() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_asyncio_run_runs_on_uvloop() -> None:
    assert asyncio.run(loop_kind()) is uvloop.Loop


def test_the_helper_tests_run_their_scenarios_with_runs_them_on_uvloop() -> None:
    seen: list[type[asyncio.AbstractEventLoop]] = []

    async def scenario() -> None:
        seen.append(await loop_kind())

    run(scenario())
    assert seen == [uvloop.Loop]


def test_a_loop_made_for_a_thread_is_uvloop() -> None:
    loop = asyncio.new_event_loop()  # as support.live_node.LiveNode makes its own
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_the_comparisons_get_the_loop_they_ask_for() -> None:
    assert run_on("uvloop", loop_kind()) is uvloop.Loop
    stdlib = run_on("asyncio", loop_kind())
    assert issubclass(stdlib, asyncio.SelectorEventLoop) and not issubclass(stdlib, uvloop.Loop)
