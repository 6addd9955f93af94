"""The embedded store's device-request queue lives in `requests.db`, written by a Rust thread that needs no GIL
(issue 15). These check what that file adds to the store contract (which runs on both stores): it is not held up
by the main file's writer, it takes over the queue of an older data directory, close answers every job handed
over, and a failing job fails alone with the error the API maps."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from devicehub.domain.model import DeviceRequest
from devicehub.errors import DuplicateAsyncId, QueueFull
from devicehub.store.sqlite.request_file import REQUESTS_FILE, RequestFileFailed
from devicehub.store.sqlite.store import SqliteStore
from devicehub.store.sqlite.writer import DB_FILE
from support.stall import WAIT, stalled_write_committed, stalled_writer


def request(async_id: str, device_id: str = "d1", payload: bytes = b"") -> DeviceRequest:
    return DeviceRequest(
        async_id=async_id,
        key_id="k1",
        account_id="a1",
        device_id=device_id,
        method="PUT" if payload else "GET",
        uri="/3/0/0",
        payload=payload,
        created_at=1.0,
        expires_at=9.0,
    )


def test_device_requests_are_queued_and_read_while_the_main_writer_is_stalled(tmp_path: Path) -> None:
    """The 202 of a device request waits for its enqueue only: a write stalled on the main file's writer thread
    (its transaction open) holds neither the enqueue nor the queue's reads."""

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            async with stalled_writer(store) as stalled:
                await asyncio.wait_for(store.enqueue_request(request("a"), 20), WAIT)
                with pytest.raises(DuplicateAsyncId):
                    await asyncio.wait_for(store.enqueue_request(request("a"), 20), WAIT)
                pending = await asyncio.wait_for(store.pending_requests("d1"), WAIT)
                assert [r.async_id for r in pending] == ["a"]
                assert await asyncio.wait_for(store.remove_request("k1", "a"), WAIT)
                assert not stalled.done()
            assert await stalled_write_committed(store)
        finally:
            await store.close()

    asyncio.run(scenario())


def test_an_older_data_directory_keeps_its_queued_requests_in_order_once(tmp_path: Path) -> None:
    """Before requests.db the queue was a table of the main file: opening moves its rows, in their order, and
    drops the table; a second open finds them once."""

    async def make_main_file() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        await store.close()

    asyncio.run(make_main_file())
    (tmp_path / REQUESTS_FILE).unlink()
    with sqlite3.connect(tmp_path / DB_FILE) as db:  # the table as the store created it before this change
        db.execute(
            "CREATE TABLE requests (seq INTEGER PRIMARY KEY AUTOINCREMENT, key_id TEXT NOT NULL,"
            " async_id TEXT NOT NULL, device_id TEXT NOT NULL, data BLOB NOT NULL, UNIQUE (key_id, async_id))"
        )
        for async_id, device_id in (("c", "d1"), ("a", "d2"), ("b", "d1")):
            r = request(async_id, device_id)
            db.execute(
                "INSERT INTO requests (key_id, async_id, device_id, data) VALUES (?, ?, ?, ?)",
                (r.key_id, r.async_id, r.device_id, msgspec.msgpack.encode(r)),
            )
    db.close()

    async def check() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            assert [r.async_id for r in await store.all_pending_requests()] == ["c", "a", "b"]
            assert [r.async_id for r in await store.pending_requests("d1")] == ["c", "b"]
            assert await store.find_request("k1", "a") == request("a", "d2")
        finally:
            await store.close()

    asyncio.run(check())
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'requests'").fetchall() == []
    db.close()
    asyncio.run(check())  # moved once: the same three, not six


def test_close_answers_every_request_handed_over_and_they_survive_it(tmp_path: Path) -> None:
    async def write() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        queued = [asyncio.ensure_future(store.enqueue_request(request(str(n), f"d{n % 7}"), 200)) for n in range(300)]
        await asyncio.sleep(0)  # every enqueue has handed its job over (each runs to its first await)
        await store.close()
        assert all(task.done() and task.exception() is None for task in queued)

    async def check() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            assert await store.count_pending_requests() == 300
            assert [r.async_id for r in await store.pending_requests("d3")] == [str(n) for n in range(3, 300, 7)]
            with pytest.raises(QueueFull):
                await store.enqueue_request(request("x", "d3"), 43)
        finally:
            await store.close()

    asyncio.run(write())
    asyncio.run(check())


def test_a_job_sqlite_refuses_fails_alone_and_its_batch_mates_are_queued(tmp_path: Path) -> None:
    """A refusal that is not the disk's (here a trigger's ABORT) is the failing call's error (answered 500), and
    the requests queued in the same transaction stand."""
    with sqlite3.connect(tmp_path / REQUESTS_FILE) as db:
        db.executescript(
            "CREATE TABLE requests (seq INTEGER PRIMARY KEY AUTOINCREMENT, key_id TEXT NOT NULL,"
            " async_id TEXT NOT NULL, device_id TEXT NOT NULL, data BLOB NOT NULL, UNIQUE (key_id, async_id));"
            "CREATE TRIGGER refuse BEFORE INSERT ON requests WHEN NEW.device_id = 'bad'"
            " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;"
        )
    db.close()

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            outcomes = await asyncio.gather(
                store.enqueue_request(request("a")),
                store.enqueue_request(request("b", "bad")),
                store.enqueue_request(request("c")),
                return_exceptions=True,
            )
            assert outcomes[0] is None and outcomes[2] is None
            assert isinstance(outcomes[1], RequestFileFailed) and "refused by the test" in str(outcomes[1])
            assert [r.async_id for r in await store.all_pending_requests()] == ["a", "c"]
            assert not store.write_health.failing
        finally:
            await store.close()

    asyncio.run(scenario())


_FULL_DISK = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    from devicehub.errors import StorageUnavailable
    from devicehub.domain.model import DeviceRequest
    from devicehub.store.sqlite.store import SqliteStore

    async def main():
        store = SqliteStore(sys.argv[1])
        await store.open()
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
        queued, error = 0, None
        for n in range(100):
            r = DeviceRequest(async_id=str(n), key_id="k1", account_id="a1", device_id="d1", method="PUT",
                              uri="/3/0/0", payload=bytes(64 * 1024), created_at=1.0, expires_at=9.0)
            try:
                await store.enqueue_request(r)
            except StorageUnavailable as e:
                error = type(e).__name__
                break
            queued += 1
        failing = store.write_health.failing
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        pending = await store.count_pending_requests()
        await store.close()
        print(json.dumps({"queued": queued, "error": error, "failing": failing, "pending": pending}))

    asyncio.run(main())
    """
)


def test_a_full_disk_answers_storage_unavailable_and_keeps_what_was_queued(tmp_path: Path) -> None:
    """A real write failure: the file size limit (RLIMIT_FSIZE, in a child process; CPython ignores SIGXFSZ)
    stops requests.db's growth. The enqueue that meets it raises StorageUnavailable (503), the store's write
    health says so, and every request queued before it is still there."""
    run = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["error"] == "StorageUnavailable"
    assert 0 < outcome["queued"] < 100
    assert outcome["failing"]
    assert outcome["pending"] == outcome["queued"]
