"""`tasks.stop` ends a task even when what it awaits swallows the first cancellation (redis-py does, now and
then: a node stopped right after it started waited for ever)."""

from __future__ import annotations

import asyncio
import contextlib

from devicehub import tasks


async def _swallowing_once(swallowed: list[bool]) -> None:
    """A loop whose first cancellation is lost inside a library call, as redis-py loses one."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed.append(True)  # lost here; the loop carries on to its next long wait


def test_a_task_that_swallowed_a_cancellation_is_cancelled_again_until_it_ends() -> None:
    async def scenario() -> None:
        swallowed: list[bool] = []
        task = asyncio.create_task(_swallowing_once(swallowed))
        await asyncio.sleep(0)
        await asyncio.wait_for(tasks.stop(task, None), timeout=5)
        assert swallowed == [True] and task.cancelled()

    asyncio.run(scenario())


def test_a_failed_task_is_stopped_and_its_error_retrieved() -> None:
    async def failing() -> None:
        raise KeyError("boom")

    async def scenario() -> None:
        task = asyncio.create_task(failing())
        with contextlib.suppress(KeyError):
            await asyncio.shield(task)
        await tasks.stop(task)  # already done: nothing to cancel, and nothing is reported as never retrieved
        assert isinstance(task.exception(), KeyError)

    asyncio.run(scenario())
