"""The SQLite writer thread keeps its cursors (issue 14 #6): a cursor released on the event-loop thread reset a
cached statement the writer was still running, and ordinary load answered `sqlite3.InterfaceError`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from devicehub.store.sqlite import SqliteStore


def test_many_concurrent_ensure_resources_calls_all_succeed(tmp_path: Path) -> None:
    async def scenario() -> list[BaseException]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            results = await asyncio.gather(
                *(store.ensure_resources(f"d{i % 50}", [f"/3/0/{i % 7}", "/1/0/1"]) for i in range(20_000)),
                return_exceptions=True,
            )
            assert len(await store.get_snapshot("d0")) == 8
        finally:
            await store.close()
        return [r for r in results if isinstance(r, BaseException)]

    failures = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert failures == [], f"{len(failures)} failed, first: {failures[0]!r}"


def test_a_read_that_would_hand_a_cursor_to_the_event_loop_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            with pytest.raises(TypeError, match="fetch its rows"):
                await store._read(lambda db: db.execute("SELECT 1"))
            # a write's result (here a cursor) is dropped inside the writer thread
            assert await store._write(lambda db: db.execute("SELECT 1")) is None  # type: ignore[func-returns-value]
            assert isinstance(await store._read(lambda db: db.execute("SELECT 1").fetchall()), list)
        finally:
            await store.close()

    asyncio.run(scenario())
