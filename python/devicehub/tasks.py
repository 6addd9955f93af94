"""Stopping a background task for good, even when a library it awaits swallows the cancellation.

redis-py's asyncio client loses a `CancelledError` that lands at the wrong moment of a command (measured with
redis-py 8.1.0: a loop of GET then a long sleep, cancelled at a random point, carried on to the sleep in 62 of 200
tries under uvloop; WATCH/MULTI in up to 117; the class of redis-py issues #2028 and #2551). A task that carries
on is then cancelled no more, and the `gather` that waits for it waits for ever: a node stopped right after it
started never exited. Beside the layers, as outages.py, so every package can stop its tasks one way."""

from __future__ import annotations

import asyncio

RECANCEL_S = 0.05  # how long a cancelled task may take to end before it is cancelled again


async def stop(*tasks: asyncio.Task[object] | None) -> None:
    """Cancel each task and wait until it has ended, cancelling again any that carried on."""
    pending = {task for task in tasks if task is not None and not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
    for ended in tasks:  # their outcome is retrieved, so none is reported as never retrieved
        if ended is not None and not ended.cancelled():
            ended.exception()
