"""A write that holds the SQLite store's writer thread (and SQLite's write lock) until released: what queues behind
it, and what must not, is then observable without any sleep."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from devicehub.store.sqlite.store import SqliteStore

WAIT = 10.0  # bound on each wait; they end on a condition, never on the timeout
# how long the stalled write holds at most: the block ends it; the bound only keeps a failing test from hanging, so it
# is the suite's per-test time-out (a 10 s bound ran out under load 6+ before the test's own checks came)
HOLD_LIMIT = 120.0


@asynccontextmanager
async def stalled_writer(store: SqliteStore) -> AsyncIterator[asyncio.Task[None]]:
    """A write that holds the writer thread and SQLite's write lock until the block ends."""
    entered, release = threading.Event(), threading.Event()

    def work(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO enrollments (endpoint_name, account_id) VALUES ('stalled', 'a1')")
        entered.set()
        release.wait(HOLD_LIMIT)

    task = asyncio.ensure_future(store._write(work))
    try:
        assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, WAIT)
        yield task
    finally:
        release.set()
        await task


async def stalled_write_committed(store: SqliteStore) -> bool:
    """Did the stalled write's row reach the table (it bypasses the store's own methods, so asked of SQLite)?"""
    row = await store._read(
        lambda db: db.execute("SELECT account_id FROM enrollments WHERE endpoint_name = 'stalled'").fetchone()
    )
    return row is not None and row[0] == "a1"
