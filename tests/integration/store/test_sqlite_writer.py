"""The SQLite writer thread keeps its cursors (issue 14 #6): a cursor released on the event-loop thread reset a
cached statement the writer was still running, and ordinary load answered `sqlite3.InterfaceError`. It combines
the writes that queue behind a transaction into the next one (issue 15), each failing alone."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devicehub.domain.model import Account
from devicehub.errors import StorageUnavailable
from devicehub.store.sqlite.store import SqliteStore
from support.stall import stalled_write_committed, stalled_writer


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


def _record_batches(store: SqliteStore) -> list[int]:
    """The size of every batch the writer thread runs from now on."""
    sizes: list[int] = []
    run_batch = store._run_batch

    def recording(batch: list[tuple[Callable[[sqlite3.Connection], Any], bool]]) -> list[tuple[bool, Any]]:
        sizes.append(len(batch))
        return run_batch(batch)

    store._run_batch = recording  # type: ignore[method-assign]
    return sizes


def test_writes_queued_behind_a_transaction_share_the_next_one_and_a_failing_one_fails_alone(tmp_path: Path) -> None:
    """Issue 15: 200 subscriptions and a duplicate account arrive while a write holds the writer; they go into one
    transaction; the duplicate gets its own IntegrityError, every other caller succeeds, and all of them survive a
    reopen (nothing acknowledged before its commit)."""

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.create_account(Account(id="a1", name="acme", tier="commercial", created_at=1.0))
            sizes = _record_batches(store)
            async with stalled_writer(store):
                writes = [
                    asyncio.ensure_future(store.add_subscription(f"k{i % 3}", f"d{i % 10}", f"/3303/{i}/5700"))
                    for i in range(100)
                ]
                duplicate = asyncio.ensure_future(
                    store.create_account(Account(id="a2", name="acme", tier="commercial", created_at=2.0))
                )
                writes += [
                    asyncio.ensure_future(store.add_subscription(f"k{i % 3}", f"d{i % 10}", f"/3303/{i}/5700"))
                    for i in range(100, 200)
                ]
                await asyncio.sleep(0)  # the queued calls reach the combiner's queue
                assert not any(w.done() for w in writes)  # none acknowledged while its transaction has not run
            results = await asyncio.gather(*writes, return_exceptions=True)
            assert results == [None] * 200
            with pytest.raises(sqlite3.IntegrityError):
                await duplicate
            assert sizes[:2] == [1, 201]  # the stalled write alone, then everything that queued behind it
        finally:
            await store.close()
        reopened = SqliteStore(tmp_path)
        await reopened.open()
        try:
            stored = {
                (f"k{k}", f"d{d}", p)
                for d in range(10)
                for k in range(3)
                for p in await reopened.list_subscriptions(f"k{k}", f"d{d}")
            }
            assert stored == {(f"k{i % 3}", f"d{i % 10}", f"/3303/{i}/5700") for i in range(200)}
            assert await reopened.get_account("a2") is None
            assert await stalled_write_committed(reopened)
        finally:
            await reopened.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_write_that_finds_the_disk_full_fails_alone_and_its_batch_mates_are_stored(tmp_path: Path) -> None:
    """SQLite may end the whole transaction on SQLITE_FULL: the batch is then run again one write at a time, so the
    write that does not fit answers StorageUnavailable and the others are stored (the database is capped with
    max_page_count, a real SQLITE_FULL)."""

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            pages = await store._read(lambda db: int(db.execute("PRAGMA page_count").fetchone()[0]))
            await store._write(lambda db: db.execute(f"PRAGMA max_page_count = {pages + 64}"))
            big = b"x" * 2_000_000  # far more than 64 pages

            def too_big(db: sqlite3.Connection) -> None:
                db.execute("INSERT INTO enrollments (endpoint_name, account_id) VALUES ('big', ?)", (big,))

            sizes = _record_batches(store)
            async with stalled_writer(store):
                before = [asyncio.ensure_future(store.enroll("a1", f"ep{i}")) for i in range(5)]
                failing = asyncio.ensure_future(store._write(too_big))
                after = [asyncio.ensure_future(store.enroll("a1", f"ep{i}")) for i in range(5, 10)]
                await asyncio.sleep(0)
            assert await asyncio.gather(*before, *after) == [None] * 10
            with pytest.raises(StorageUnavailable):
                await failing
            assert sizes[:2] == [1, 11]
            assert [await store.enrolled_account(f"ep{i}") for i in range(10)] == ["a1"] * 10
            assert await store.enrolled_account("big") is None
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
