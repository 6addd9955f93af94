"""Script calls made together go to Redis together: the calls a node makes while one batch is in flight, or within
`SPACING_S` of the last batch's departure, wait and leave as the next batch, one pipeline (a round trip per server)
instead of one round trip and one pooled connection each.

Issue 30 #5: a registration storm in Redis mode made one admission script call per Register
(`RedisEnrolment.admit_endpoint`), 16 % of the node's CPU in a profile, most of it redis-py taking a connection,
sending and reading one reply at a time. Each call stays one atomic step with its own reply; only the transport is
shared. A batch is sent at the next turn of the event loop after its first call when none left in the last
`SPACING_S`, so a lone call waits for nothing but that turn.

On one Redis (fifteenth session) the calls of a batch are also one script run per `GROUP_CALLS`: the script takes a
list of calls (each its keys and one msgpack item) and answers a list. redis-py spends ~12 µs of the node's CPU on
each command of a pipeline besides its arguments (packing, a reply parsed, a response callback) and Redis a script
run on each, so five admissions cost five of each, now one. A cluster keeps a call per item, in its keys' slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from devicehub.store.redis.writes import lua_args

# Issue 30 #5: at most one batch per this long. Registers arriving at 1 000/s came ~1 ms apart and each found the
# previous batch answered already, so nearly every admission was a round trip of its own: 140 µs of the node's CPU
# and 33 µs of redis-server's, against 46 and 13 µs in a batch of five (a real redis-server, this machine). Gathering
# for 5 ms costs a Register under load at most 5 ms before its answer, and a quiet node nothing.
SPACING_S = 0.005

# items per script run on one Redis: a script holds Redis for its whole run (an admission is a few µs of it)
GROUP_CALLS = 64


class EvalEach(Protocol):
    def __call__(self, calls: Sequence[tuple[Any, ...]], *, raise_errors: bool = True) -> Awaitable[list[Any]]: ...


class ScriptCalls:
    """Queues calls of one script, each its keys and its item; one sender at a time hands each batch to `eval_each`
    (RedisConnection's) as one script call per group of items (`merged()`: one Redis) or per item (a cluster). The
    script reads KEYS as the items' keys in order and `cmsgpack.unpack(ARGV[1])` as the list of their items, and
    returns a list of their replies."""

    def __init__(
        self, eval_each: EvalEach, script: str, *, merged: Callable[[], bool], spacing: float = SPACING_S
    ) -> None:
        self._eval_each = eval_each
        self._script = script
        self._merged = merged
        self._spacing = spacing
        self._queued: list[tuple[tuple[str, ...], Any, asyncio.Future[Any]]] = []
        self._sender: asyncio.Task[None] | None = None
        self._sent_at = float("-inf")  # loop time the last batch left

    def call(self, keys: tuple[str, ...], item: Any) -> Awaitable[Any]:
        """The item's reply (or its call's error), once the batch holding this call is answered."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        sender = self._sender
        if sender is not None and not sender.done() and sender.get_loop() is not loop:
            sender, self._queued = None, []  # a loop that ended with a batch in flight (a store reopened in another)
            self._sent_at = float("-inf")
        self._queued.append((keys, item, future))
        if sender is None or sender.done():
            self._sender = asyncio.create_task(self._send(), name="redis-script-calls")
        return future

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queued:
                wait = self._sent_at + self._spacing - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)  # the calls of the next few ms join this batch
                batch, self._queued = self._queued, []
                self._sent_at = loop.time()
                await self._answer(batch)
        except BaseException:  # the sender was cancelled (the loop is ending): so are the calls it carried
            for *_, future in self._queued:
                future.cancel()
            self._queued = []
            raise

    def _calls(self, batch: list[tuple[tuple[str, ...], Any, asyncio.Future[Any]]]) -> list[list[int]]:
        """The groups of the batch's positions, one script call each."""
        size = GROUP_CALLS if self._merged() else 1
        return [list(range(start, min(start + size, len(batch)))) for start in range(0, len(batch), size)]

    async def _answer(self, batch: list[tuple[tuple[str, ...], Any, asyncio.Future[Any]]]) -> None:
        groups = self._calls(batch)
        calls = []
        for group in groups:
            keys = [key for i in group for key in batch[i][0]]
            calls.append((self._script, len(keys), *keys, lua_args([batch[i][1] for i in group])))
        try:
            replies = await self._eval_each(calls, raise_errors=False)
        except Exception as error:  # the pipeline itself failed (a lost connection): each call of it hears it
            for *_, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        except BaseException:
            for *_, future in batch:
                future.cancel()
            raise
        for group, reply in zip(groups, replies, strict=True):
            for n, i in enumerate(group):
                future = batch[i][2]
                if future.done():  # its caller was cancelled
                    continue
                if isinstance(reply, Exception):  # the group's script failed: each of its items hears it
                    future.set_exception(reply)
                else:
                    future.set_result(reply[n])
