"""Issue 30 #1: the embedded store's reported values cost the same whether a device notifies often or rarely.

A flush upserted each (device, path) of its interval into `snapshot`: with many devices each value dirtied a page
of its own and the commit wrote them all to the WAL. Values are now appended to a log, a flush a row (issue 30 #2),
and folded into `snapshot` now and then (store/sqlite/reported_log.py); these tests hold the pages and rows a flush
writes, and the snapshot's durability and read-your-writes across the log: a value appended and not folded is read
back, survives a crash, and neither a newer value written another way nor a delete (crash or not) is undone by a
later fold; a log a crash of the release before left (a row per value) is folded on open. A fold is written from the
values the store holds in memory, not from its rows read back (issue 30 #1), and leaves the rows of a flush in
flight when it began."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path

import msgspec

from devicehub.domain.model import ReportedValue, ResourceLink, SnapshotResource
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.reported_log import FOLD_MAX_S, ReportedLog, encode_batch, fold_values
from devicehub.store.sqlite.schema import SCHEMA
from devicehub.store.sqlite.store import SqliteStore
from devicehub.store.sqlite.writer import DB_FILE
from support.stores import device
from support.waiting import eventually

DEVICES = 3000
PATHS = [f"/3/0/{r}" for r in range(19)]  # a Pelion device's resources: rows of the snapshot per device


def _value(text: str, at: float = 1.0) -> ReportedValue:
    return ReportedValue(value=text.encode(), content_type="text/plain", reported_at=at)


def _side(tmp_path: Path) -> contextlib.closing[sqlite3.Connection]:
    """A second connection on the store's file, as a reader or an inspector would open one (closed after)."""
    return contextlib.closing(sqlite3.connect(tmp_path / DB_FILE, isolation_level=None))


def _crash(store: SqliteStore) -> None:
    """What a crash after the last flush leaves: `close` without its fold (the log keeps its rows)."""
    store._log.holds_any = lambda: False  # type: ignore[method-assign]


def _on_reopen(tmp_path: Path, *device_ids: str) -> list[list[SnapshotResource]]:
    """Each device's snapshot as a store opened afresh on the directory reads it (its `open` folds what the log
    holds), the store closed after."""

    async def read() -> list[list[SnapshotResource]]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            return [await store.get_snapshot(device_id) for device_id in device_ids]
        finally:
            await store.close()

    return asyncio.run(asyncio.wait_for(read(), 20))


def test_a_flush_of_many_devices_values_writes_a_few_pages_not_a_page_per_device(tmp_path: Path) -> None:
    async def scenario() -> int:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            with _side(tmp_path) as side:  # the fleet's snapshot rows, written outside the store for speed
                side.execute("BEGIN")
                side.executemany(
                    "INSERT INTO snapshot (device_id, path) VALUES (?, ?)",
                    [(f"{n:032x}", path) for n in range(DEVICES) for path in PATHS],
                )
                side.execute("COMMIT")
                side.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            store._log = ReportedLog(clock=lambda: 0.0)  # no fold falls due in this flush (the seeding takes seconds)
            await store.set_reported_many([(f"{n:032x}", "/3/0/9", _value(str(n))) for n in range(DEVICES)])
            await store._reported.flush()
            with _side(tmp_path) as side:  # (busy, frames in the WAL, checkpointed): what the flush wrote
                frames = int(side.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
            return frames
        finally:
            await store.close()

    frames = asyncio.run(asyncio.wait_for(scenario(), 60))
    # one upsert per value into snapshot pages of ~3 devices each wrote ~900 pages; appended, ~50
    assert frames < DEVICES // 20, frames


def test_a_flush_of_many_devices_values_is_one_row_of_the_log(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, list[SnapshotResource]]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            store._log = ReportedLog(clock=lambda: 0.0)  # no fold falls due
            await store.set_reported_many([(f"{n:032x}", f"/3/0/{n % 3}", _value(str(n))) for n in range(500)])
            await store._reported.flush()
            with _side(tmp_path) as side:
                rows = int(side.execute("SELECT count(*) FROM reported_batches").fetchone()[0])
            store._cache.forget(f"{7:032x}")  # read from the file and the log, not from memory
            return rows, await store.get_snapshot(f"{7:032x}")
        finally:
            await store.close()

    rows, snapshot = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert rows == 1  # a row per value (500) before issue 30 #2
    assert snapshot == [SnapshotResource(path="/3/0/1", reported=_value("7"))]


def test_values_in_the_log_are_read_back_survive_a_crash_and_are_folded_on_open(tmp_path: Path) -> None:
    async def before_the_crash() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.ensure_resources("d1", ["/3/0/9", "/3/0/0"])
            await store.set_reported("d1", "/3/0/9", _value("old"))
            await store._reported.flush()
            await store.set_reported("d1", "/3/0/9", _value("new", 2.0))
            await store.set_reported("d1", "/3303/0/5700", _value("21.5"))  # a path with no row yet
            await store._reported.flush()
            store._cache.forget("d1")  # read from the file, not from memory
            assert await store.get_snapshot("d1") == [
                SnapshotResource(path="/3/0/0"),
                SnapshotResource(path="/3/0/9", reported=_value("new", 2.0)),
                SnapshotResource(path="/3303/0/5700", reported=_value("21.5")),
            ]
            _crash(store)
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(before_the_crash(), 20))
    with _side(tmp_path) as side:  # the values were in the log only, and durable there
        assert side.execute("SELECT count(*) FROM snapshot WHERE reported IS NOT NULL").fetchone()[0] == 0
        assert side.execute("SELECT count(*) FROM reported_batches").fetchone()[0] == 2  # a row per flush
    assert _on_reopen(tmp_path, "d1") == [
        [
            SnapshotResource(path="/3/0/0"),
            SnapshotResource(path="/3/0/9", reported=_value("new", 2.0)),
            SnapshotResource(path="/3303/0/5700", reported=_value("21.5")),
        ]
    ]
    with _side(tmp_path) as side:
        assert side.execute("SELECT count(*) FROM reported_batches").fetchone()[0] == 0


def test_a_registration_s_value_is_not_undone_by_the_fold_of_an_older_one(tmp_path: Path) -> None:
    registered = msgspec.structs.replace(device("d1", "ep-1"), resources=(ResourceLink(path="/3/0/9"),))

    async def scenario() -> list[SnapshotResource]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.set_reported("d1", "/3/0/9", _value("older"))
            await store._reported.flush()  # in the log, not folded
            await store.put_registered_devices([registered], [], [("d1", "/3/0/9", _value("announced", 2.0))])
            await store._reported.flush()
        finally:
            await store.close()  # folds the log
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            return await store.get_snapshot("d1")
        finally:
            await store.close()

    assert asyncio.run(asyncio.wait_for(scenario(), 20)) == [
        SnapshotResource(path="/3/0/9", reported=_value("announced", 2.0))
    ]


def test_a_deleted_device_s_values_in_the_log_are_not_folded_back(tmp_path: Path) -> None:
    async def scenario() -> list[SnapshotResource]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.put_registered_devices([device("d1", "ep-1")], [], [])
            await store.set_reported("d1", "/3/0/9", _value("v"))
            await store._reported.flush()
            await store.delete_device("d1")
        finally:
            await store.close()
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            return await store.get_snapshot("d1")
        finally:
            await store.close()

    assert asyncio.run(asyncio.wait_for(scenario(), 20)) == []
    with _side(tmp_path) as side:
        assert side.execute("SELECT count(*) FROM snapshot").fetchone()[0] == 0


def test_a_device_deleted_before_a_crash_gets_none_of_its_logged_values_back(tmp_path: Path) -> None:
    async def before_the_crash() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.put_registered_devices([device("d1", "ep-1"), device("d2", "ep-2")], [], [])
            await store.set_reported("d1", "/3/0/9", _value("gone"))
            await store.set_reported("d2", "/3/0/9", _value("kept"))
            await store._reported.flush()
            await store.delete_device("d1")  # its value is in a log row with d2's
            _crash(store)
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(before_the_crash(), 20))
    assert _on_reopen(tmp_path, "d1", "d2") == [
        [],
        [SnapshotResource(path="/3/0/9", reported=_value("kept"))],
    ]
    with _side(tmp_path) as side:
        assert side.execute("SELECT device_id FROM snapshot").fetchall() == [("d2",)]


def test_a_log_of_a_row_per_value_left_by_an_earlier_release_is_folded_on_open(tmp_path: Path) -> None:
    _on_reopen(tmp_path)  # the schema, as this release makes it
    with _side(tmp_path) as side:  # what the release before left after a crash: two values of one path, in order
        side.executemany(
            "INSERT INTO reported_log (device_id, path, reported) VALUES (?, ?, ?)",
            [("d1", "/3/0/9", encode(_value("old"))), ("d1", "/3/0/9", encode(_value("new", 2.0)))],
        )
    assert _on_reopen(tmp_path, "d1") == [[SnapshotResource(path="/3/0/9", reported=_value("new", 2.0))]]
    with _side(tmp_path) as side:
        assert side.execute("SELECT count(*) FROM reported_log").fetchone()[0] == 0


def test_rows_of_the_release_before_keyed_by_device_fold_on_open_in_order_with_today_s(tmp_path: Path) -> None:
    """A crash of the release before left rows `{device id: {path: value}}`; today's rows are keyed by path
    (`encode_batch`). Both fold on open, in rowid order: a later row's value wins whatever its format, and a
    tombstone after them keeps the device's values out."""
    _on_reopen(tmp_path)  # the schema, as this release makes it
    with _side(tmp_path) as side:
        side.executemany(
            "INSERT INTO reported_batches (data) VALUES (?)",
            [
                (encode({"d1": {"/3/0/9": _value("old"), "/3/0/0": _value("kept")}, "d2": {"/3/0/9": _value("x")}}),),
                (encode_batch({"/3/0/9": {"d1": _value("new", 2.0)}, "/3/0/1": {"d3": _value("y")}}),),
                (encode({"d3": {"/3/0/1": _value("newer", 3.0)}}),),
            ],
        )
        side.execute("INSERT INTO reported_batches (deleted) VALUES ('d2')")
    assert _on_reopen(tmp_path, "d1", "d2", "d3") == [
        [
            SnapshotResource(path="/3/0/0", reported=_value("kept")),
            SnapshotResource(path="/3/0/9", reported=_value("new", 2.0)),
        ],
        [],
        [SnapshotResource(path="/3/0/1", reported=_value("newer", 3.0))],
    ]
    with _side(tmp_path) as side:
        assert side.execute("SELECT count(*) FROM reported_batches").fetchone()[0] == 0


def test_a_fold_from_memory_writes_each_device_s_value_of_each_path_to_its_row(tmp_path: Path) -> None:
    """The log keys its values by path (issue 30 #1); the fold writes them by (device, path), each to its row."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript(SCHEMA)
    latest = {
        "/3/0/9": {"d2": _value("d2-9"), "d1": _value("d1-9")},
        "/3/0/0": {"d1": _value("d1-0"), "d3": _value("d3-0")},
    }
    fold_values(db, (latest, 0))
    assert db.execute("SELECT device_id, path, reported FROM snapshot").fetchall() == [
        ("d1", "/3/0/0", encode(_value("d1-0"))),
        ("d1", "/3/0/9", encode(_value("d1-9"))),
        ("d2", "/3/0/9", encode(_value("d2-9"))),
        ("d3", "/3/0/0", encode(_value("d3-0"))),
    ]


def _fold_due(store: SqliteStore) -> None:
    """The next flush's append folds the log (as once `FOLD_MAX_S` passed)."""
    store._log._folded_at -= FOLD_MAX_S


def test_a_fold_keeps_the_values_of_a_flush_in_flight_when_it_began(tmp_path: Path) -> None:
    async def before_the_crash() -> tuple[int, list[tuple[str, bytes]], list[SnapshotResource]]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.set_reported("d1", "/3/0/9", _value("folded"))
            await store.set_reported("d2", "/3/0/9", _value("folded"))
            await store._reported.flush()  # appended: what the fold covers
            gate = threading.Event()
            busy = asyncio.ensure_future(store._write(lambda db: gate.wait(10)))  # the writer thread held: the
            await eventually(lambda: store._combiner is not None and not store._waiting)  # flushes queue behind
            await store.set_reported("d1", "/3/0/9", _value("in flight", 2.0))
            in_flight = asyncio.ensure_future(store._reported.flush())
            await eventually(lambda: len(store._reported._writing) == 1)
            _fold_due(store)
            await store.set_reported("d3", "/3/0/9", _value("folding"))
            folding = asyncio.ensure_future(store._reported.flush())  # queued after the flush in flight, folds
            await eventually(lambda: len(store._reported._writing) == 2)
            gate.set()
            await asyncio.gather(busy, in_flight, folding)
            with _side(tmp_path) as side:
                rows = int(side.execute("SELECT count(*) FROM reported_batches").fetchone()[0])
                folded = [
                    (str(d), bytes(r)) for d, r in side.execute("SELECT device_id, reported FROM snapshot ORDER BY 1")
                ]
            store._cache.forget("d1")  # read from the file and the log, not from memory
            read = await store.get_snapshot("d1")
            _crash(store)
            return rows, folded, read
        finally:
            await store.close()

    rows, folded, read = asyncio.run(asyncio.wait_for(before_the_crash(), 20))
    # the fold covered the first flush (appended when it began): its row gone; the flush in flight and the folding
    # flush appended after it, so their rows stay, and their values are not in `snapshot` yet
    assert rows == 2
    assert folded == [("d1", encode(_value("folded"))), ("d2", encode(_value("folded")))]
    assert read == [SnapshotResource(path="/3/0/9", reported=_value("in flight", 2.0))]
    assert _on_reopen(tmp_path, "d1", "d2", "d3") == [  # and a crash loses none of them
        [SnapshotResource(path="/3/0/9", reported=_value("in flight", 2.0))],
        [SnapshotResource(path="/3/0/9", reported=_value("folded"))],
        [SnapshotResource(path="/3/0/9", reported=_value("folding"))],
    ]


def test_a_fold_writes_the_values_held_in_memory_and_reads_no_row_of_the_log_back(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], int, list[SnapshotResource]]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            for n in range(3):  # three flushes of three devices' values: nine entries, the latest three fold
                await store.set_reported_many([(f"d{k}", "/3/0/9", _value(f"{n}", n)) for k in range(3)])
                await store._reported.flush()
            assert store._db is not None
            statements: list[str] = []
            store._db.set_trace_callback(statements.append)  # the writer's statements (called in its thread)
            _fold_due(store)
            await store.set_reported("d9", "/3/0/9", _value("folding"))
            await store._reported.flush()
            store._db.set_trace_callback(None)
            with _side(tmp_path) as side:
                rows = int(side.execute("SELECT count(*) FROM reported_batches").fetchone()[0])
            store._cache.forget("d1")
            return statements, rows, await store.get_snapshot("d1")
        finally:
            await store.close()

    statements, rows, read = asyncio.run(asyncio.wait_for(scenario(), 20))
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "data" in s]
    assert reads == []  # no entry of the log read back and merged (before: the fold read every row, in order)
    upserts = [s for s in statements if s.startswith("INSERT INTO snapshot")]
    assert len(upserts) == 3  # the latest value of each of the three devices, one each
    assert rows == 1  # the three flushes folded; the folding flush's own row stays
    assert read == [SnapshotResource(path="/3/0/9", reported=_value("2", 2))]


def test_a_delete_queued_before_a_fold_keeps_the_device_s_values_out_of_it(tmp_path: Path) -> None:
    async def before_the_crash() -> tuple[list[str], list[SnapshotResource]]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.put_registered_devices([device("d1", "ep-1"), device("d2", "ep-2")], [], [])
            await store.set_reported("d1", "/3/0/9", _value("gone"))
            await store.set_reported("d2", "/3/0/9", _value("kept"))
            await store._reported.flush()
            gate = threading.Event()
            busy = asyncio.ensure_future(store._write(lambda db: gate.wait(10)))  # the writer thread held
            await eventually(lambda: store._combiner is not None and not store._waiting)
            deleting = asyncio.ensure_future(store.delete_device("d1"))  # runs before the fold; d1 still logged
            await eventually(lambda: len(store._waiting) == 1)
            _fold_due(store)
            await store.set_reported("d3", "/3/0/9", _value("folding"))
            folding = asyncio.ensure_future(store._reported.flush())
            await eventually(lambda: len(store._waiting) == 2)
            gate.set()
            await asyncio.gather(busy, deleting, folding)
            with _side(tmp_path) as side:
                folded = [str(d) for (d,) in side.execute("SELECT device_id FROM snapshot WHERE reported IS NOT NULL")]
            store._cache.forget("d1")
            read = await store.get_snapshot("d1")
            _crash(store)
            return folded, read
        finally:
            await store.close()

    assert asyncio.run(asyncio.wait_for(before_the_crash(), 20)) == (["d2"], [])
    assert _on_reopen(tmp_path, "d1", "d2", "d3") == [
        [],
        [SnapshotResource(path="/3/0/9", reported=_value("kept"))],
        [SnapshotResource(path="/3/0/9", reported=_value("folding"))],
    ]


def test_a_delete_racing_a_flush_in_flight_leaves_none_of_the_device_s_values(tmp_path: Path) -> None:
    """A delete's own flush does not wait for one already in flight, whose append is queued before the delete:
    `logged` was read before that append completed, so no tombstone followed it and its row put the deleted
    device's value back into `snapshot` at the next fold from the rows (an orphan row, never deleted)."""

    async def before_the_crash() -> list[SnapshotResource]:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            await store.put_registered_devices([device("d1", "ep-1"), device("d2", "ep-2")], [], [])
            gate = threading.Event()
            busy = asyncio.ensure_future(store._write(lambda db: gate.wait(10)))  # the writer thread held
            await eventually(lambda: store._combiner is not None and not store._waiting)
            await store.set_reported("d1", "/3/0/9", _value("gone"))
            await store.set_reported("d2", "/3/0/9", _value("kept"))
            in_flight = asyncio.ensure_future(store._reported.flush())  # its append queued, not committed
            await eventually(lambda: len(store._reported._writing) == 1 and len(store._waiting) == 1)
            deleting = asyncio.ensure_future(store.delete_device("d1"))  # its flush finds nothing pending
            await eventually(lambda: len(store._waiting) == 2)
            gate.set()
            await asyncio.gather(busy, in_flight, deleting)
            store._cache.forget("d1")
            read = await store.get_snapshot("d1")
            _crash(store)
            return read
        finally:
            await store.close()

    assert asyncio.run(asyncio.wait_for(before_the_crash(), 20)) == []
    assert _on_reopen(tmp_path, "d1", "d2") == [[], [SnapshotResource(path="/3/0/9", reported=_value("kept"))]]
    with _side(tmp_path) as side:
        assert side.execute("SELECT device_id FROM snapshot").fetchall() == [("d2",)]
