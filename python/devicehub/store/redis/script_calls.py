"""Script calls made together go to Redis together: the calls a node makes while one batch is in flight wait for it
and leave as the next batch, one pipeline (a round trip per server) instead of one round trip and one pooled
connection each.

Issue 30 #5: a registration storm in Redis mode made one admission script call per Register
(`RedisEnrolment.admit_endpoint`), 16 % of the node's CPU in a profile, most of it redis-py taking a connection,
sending and reading one reply at a time. Each call stays its own script run (atomic in its slot, its own reply or
error); only the transport is shared. A batch is sent at the next turn of the event loop after its first call, so a
lone call waits for nothing but that turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol


class EvalEach(Protocol):
    def __call__(self, calls: Sequence[tuple[Any, ...]], *, raise_errors: bool = True) -> Awaitable[list[Any]]: ...


class ScriptCalls:
    """Queues EVAL argument tuples; one sender at a time hands each batch to `eval_each` (RedisConnection's)."""

    def __init__(self, eval_each: EvalEach) -> None:
        self._eval_each = eval_each
        self._queued: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._sender: asyncio.Task[None] | None = None

    def call(self, script_args: tuple[Any, ...]) -> Awaitable[Any]:
        """The script's reply (or its error), once the batch holding this call is answered."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        sender = self._sender
        if sender is not None and not sender.done() and sender.get_loop() is not loop:
            sender, self._queued = None, []  # a loop that ended with a batch in flight (a store reopened in another)
        self._queued.append((script_args, future))
        if sender is None or sender.done():
            self._sender = asyncio.create_task(self._send(), name="redis-script-calls")
        return future

    async def _send(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            try:
                replies = await self._eval_each([args for args, _ in batch], raise_errors=False)
            except Exception as error:  # the pipeline itself failed (a lost connection): each call of it hears it
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            except BaseException:  # the sender was cancelled (the loop is ending): so are the calls it carried
                for _, future in [*batch, *self._queued]:
                    future.cancel()
                self._queued = []
                raise
            for (_, future), reply in zip(batch, replies, strict=True):
                if future.done():  # its caller was cancelled
                    continue
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
