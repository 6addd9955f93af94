"""The connection machinery: one writer thread combining writes into transactions, reader threads, open and close."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from devicehub.errors import StorageUnavailable
from devicehub.store.record_upgrades import decode
from devicehub.store.sqlite.codec import T
from devicehub.store.sqlite.endpoint_directory import EndpointDirectory
from devicehub.store.sqlite.health import WriteHealth
from devicehub.store.sqlite.read_cache import ReadCache
from devicehub.store.sqlite.reported_log import ReportedLog, encode_batch, fold, fold_legacy, fold_values
from devicehub.store.sqlite.request_file import REQUESTS_FILE, RequestFile
from devicehub.store.sqlite.schema import (
    DEVICE_INDEXES,
    SCHEMA,
    add_channel_columns,
    add_device_columns,
    key_contacts_by_device,
)
from devicehub.store.write_behind import DEFAULT_INTERVAL_S, Pending, ReportedWriteBehind

log = logging.getLogger("devicehub.store")

DB_FILE = "devicehub.sqlite3"

MAX_BATCH = 256  # writes combined into one transaction at most

READERS = 2  # reader threads (connections); reads are short point lookups, the GIL bounds what more would give

_Work = tuple[Callable[[sqlite3.Connection], Any], bool, "asyncio.Future[Any]"]  # work, keep its result, caller


def _disk_fault(error: BaseException) -> bool:
    """SQLITE_FULL and SQLITE_IOERR (with its extended codes): the disk, not the request, is at fault."""
    return isinstance(error, sqlite3.OperationalError) and error.sqlite_errorcode & 0xFF in (
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
    )


def _roll_back(db: sqlite3.Connection) -> None:
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite may have rolled back already: what the caller does next does not depend on it


class SqliteWriter:
    """One SQLite database file in WAL mode: a writer thread, reader threads, and the request queue's file."""

    def __init__(self, data_dir: Path, *, reported_flush_s: float = DEFAULT_INTERVAL_S) -> None:
        self._path = Path(data_dir) / DB_FILE
        self._db: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._readers = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="sqlite-reader")
        self._reader_local = threading.local()
        self._reader_dbs: list[sqlite3.Connection] = []
        self._cache = ReadCache()  # devices and snapshots in memory: this process is the database's one writer
        self._reported = ReportedWriteBehind(self._write_reported, reported_flush_s)
        self._log = ReportedLog()  # the flushes' values appended, folded into `snapshot` now and then
        self.write_health = WriteHealth()
        self._requests = RequestFile(self._path.parent, self.write_health)  # the device-request queue's own file
        self._waiting: list[_Work] = []  # work for the writer thread's next transaction
        # issue 16 #1: a new endpoint name's device id is claimed in memory and written with the device's record
        # (`put_registered_devices`), so a first Register neither commits nor waits for the writer thread
        self._directory = EndpointDirectory()
        self._combiner: asyncio.Task[None] | None = None  # hands `_waiting` to the thread while there is any

    # Issue 14 #6: a cursor released on the event-loop thread resets a cached statement the writer thread may be
    # running (sqlite3.InterfaceError). So no cursor leaves the writer thread: `_write` drops whatever the work
    # returns inside the thread, and `_read` accepts only fetched values (rows, ints, records), never a cursor.
    async def _write(self, work: Callable[[sqlite3.Connection], object]) -> None:
        await self._submit(work, False)

    async def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        result: T = await self._submit(work, True)
        return result

    def _submit(self, work: Callable[[sqlite3.Connection], Any], keep: bool) -> asyncio.Future[Any]:
        """Queue work for the writer thread's next transaction; the future resolves once that transaction ended."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._waiting.append((work, keep, future))
        if self._combiner is None:
            self._combiner = loop.create_task(self._combine())
        return future

    async def _combine(self) -> None:
        """Hands the waiting work to the writer thread, a batch at a time, until none waits (then it ends)."""
        loop = asyncio.get_running_loop()
        batch: list[_Work] = []
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
                outcomes = await loop.run_in_executor(self._thread, self._run_batch, [(w, k) for w, k, _ in batch])
                for (_, _, future), (ok, value) in zip(batch, outcomes, strict=True):
                    if not future.done():  # a caller cancelled meanwhile: its work ran all the same
                        if ok:
                            future.set_result(value)
                        else:
                            future.set_exception(value)
                batch = []
        except BaseException as error:  # the executor is gone or this task was cancelled: nobody waits forever
            for _, _, future in (*batch, *self._waiting):
                if not future.done():
                    future.set_exception(error) if isinstance(error, Exception) else future.cancel()
            self._waiting = []
            if not isinstance(error, Exception):
                raise  # cancelled: the task ends cancelled; an error went to every caller instead
        finally:
            self._combiner = None

    def _run_batch(self, batch: list[tuple[Callable[[sqlite3.Connection], Any], bool]]) -> list[tuple[bool, Any]]:
        """Writer thread: one transaction for the whole batch. Every statement hands the GIL back and forth with the
        event loop, so the common case adds only BEGIN and COMMIT; when a work fails, the transaction is rolled back
        and the batch runs again with a savepoint per work (`_isolated`), so an error undoes only its own work."""
        if len(batch) == 1:
            return [self._alone(*batch[0])]
        db = self._db
        if db is None:
            return [(False, RuntimeError("store is not open"))] * len(batch)
        outcomes: list[tuple[bool, Any]] = []
        try:
            db.execute("BEGIN")
            for work, keep in batch:
                result = work(db)
                if keep and isinstance(result, sqlite3.Cursor):
                    raise TypeError("a store read must fetch its rows inside the writer thread")
                outcomes.append((True, result if keep else None))
            db.execute("COMMIT")
        except Exception:
            _roll_back(db)
            return self._isolated(db, batch)
        self.write_health.succeeded()
        return outcomes

    def _isolated(
        self, db: sqlite3.Connection, batch: list[tuple[Callable[[sqlite3.Connection], Any], bool]]
    ) -> list[tuple[bool, Any]]:
        """One transaction, a savepoint per work: a failing work is rolled back alone and its error is its outcome.
        When SQLite ends the transaction itself (a full disk, an I/O error) or the commit fails, every work runs
        again alone, so each caller gets the outcome it would have had without the batch."""
        outcomes: list[tuple[bool, Any]] = []
        try:
            db.execute("BEGIN")
            for work, keep in batch:
                db.execute("SAVEPOINT combined")
                try:
                    result = work(db)
                    if keep and isinstance(result, sqlite3.Cursor):
                        raise TypeError("a store read must fetch its rows inside the writer thread")
                except Exception as error:
                    if not db.in_transaction or _disk_fault(error):
                        raise
                    db.execute("ROLLBACK TO combined")
                    db.execute("RELEASE combined")
                    outcomes.append((False, error))
                else:
                    db.execute("RELEASE combined")
                    outcomes.append((True, result if keep else None))
            db.execute("COMMIT")
        except Exception:
            _roll_back(db)
            return [self._alone(work, keep) for work, keep in batch]
        if any(ok for ok, _ in outcomes):
            self.write_health.succeeded()
        return outcomes

    def _alone(self, work: Callable[[sqlite3.Connection], Any], keep: bool) -> tuple[bool, Any]:
        try:
            return True, self._transaction(work, keep)
        except Exception as error:
            return False, error

    async def _query(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """A read on a reader thread: sees every committed write, never queues behind the writer."""
        result: T = await asyncio.get_running_loop().run_in_executor(self._readers, self._reader_query, work)
        return result

    def _reader_query(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        db: sqlite3.Connection | None = getattr(self._reader_local, "db", None)
        if db is None:
            if self._db is None:
                raise RuntimeError("store is not open")
            db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA query_only=ON")
            self._reader_local.db = db
            self._reader_dbs.append(db)
        result = work(db)
        if isinstance(result, sqlite3.Cursor):
            raise TypeError("a store read must fetch its rows inside the reader thread")
        return result

    def _transaction(self, work: Callable[[sqlite3.Connection], Any], keep: bool) -> Any:
        db = self._db
        if db is None:
            raise RuntimeError("store is not open")
        try:
            with db:  # commits on success, rolls back on any exception
                result = work(db)
        except sqlite3.OperationalError as error:
            if not _disk_fault(error):
                raise
            self.write_health.failed(str(error))
            raise StorageUnavailable("the service cannot store changes right now") from error
        if not keep:
            self.write_health.succeeded()
            return None
        if isinstance(result, sqlite3.Cursor):
            raise TypeError("a store read must fetch its rows inside the writer thread")
        return result

    async def open(self) -> None:
        def connect() -> None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed transaction survives a process crash (kill -9); only an OS crash
            # can lose the last transactions, which is what the documented flush bound is about.
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=OFF")
            db.executescript(SCHEMA)
            add_device_columns(db)
            add_channel_columns(db)
            key_contacts_by_device(db)
            db.executescript(DEVICE_INDEXES)
            db.isolation_level = "DEFERRED"
            self._db = db
            # devices written before device_ids existed keep their id: their rows are read last and win
            ids = [*db.execute("SELECT account_id, endpoint_name, id FROM device_ids")]
            ids += db.execute("SELECT account_id, endpoint_name, id FROM devices")
            self._directory.load(db.execute("SELECT endpoint_name, account_id FROM enrollments"), ids)

        await asyncio.get_running_loop().run_in_executor(self._thread, connect)
        await self._write(fold_legacy)  # what the log held when the last run stopped (a crash: a graceful stop
        await self._write(fold)  # folds), in an earlier release's log, then in today's
        self._log.folded()
        await self._requests.open()
        await self._move_requests_table()

    async def close(self) -> None:
        await self._reported.close()
        if self._log.holds_any():
            try:
                covering = self._log.covering()  # nothing in flight any more: what the log holds, from memory
                await self._write(lambda db: fold_values(db, covering))
                self._log.folded()
            except StorageUnavailable:
                pass  # the log keeps them: the next open folds them
        if self._combiner is not None:  # what callers were told to wait for is written before closing
            await asyncio.wait([self._combiner])  # (a failure went to those callers: not raised here)
        await self._requests.close()

        def disconnect() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        self._readers.shutdown(wait=True)
        for reader in self._reader_dbs:  # no reader thread runs any more: closing them from here is safe
            reader.close()
        self._reader_dbs.clear()
        await asyncio.get_running_loop().run_in_executor(self._thread, disconnect)
        self._thread.shutdown(wait=True)

    async def _move_requests_table(self) -> None:
        """Before requests.db, the queue was a table of the main file: its rows move over, in their order, once.
        Imported before the table is dropped, so a crash between leaves them in both and the next start imports
        none twice (an async-id already queued is skipped)."""

        def rows(db: sqlite3.Connection) -> list[tuple[str, str, str, bytes]] | None:
            if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'requests'").fetchone():
                return None  # a data directory made since: nothing to move, nothing to drop
            return [
                (str(k), str(a), str(d), bytes(data))
                for k, a, d, data in db.execute("SELECT key_id, async_id, device_id, data FROM requests ORDER BY seq")
            ]

        moving = await self._read(rows)
        if moving is None:
            return
        if moving:
            await self._requests.import_rows(moving)
            log.info("moved %d queued device requests to %s", len(moving), REQUESTS_FILE)
        await self._write(lambda db: db.execute("DROP TABLE requests"))

    async def _write_reported(self, pending: Pending) -> None:
        batch = encode_batch(pending)  # one row, one call into msgspec: no Python work per value (reported_log.py)
        # a fold is written from the values the log holds in memory (reported_log.py), not read back from its rows
        entries = sum(map(len, pending.values()))
        folding = self._log.start_fold() if self._log.due(entries, len(batch)) else None
        try:
            rowid: int = await self._read(lambda db: ReportedLog.append(db, batch, folding))
        except BaseException:
            if folding is not None:
                self._log.fold_failed()
            raise
        self._log.appended(pending, len(batch), folding is not None, rowid)

    async def _one(self, kind: type[T], sql: str, args: tuple[object, ...], *, reader: bool = False) -> T | None:
        def work(db: sqlite3.Connection) -> T | None:
            row = db.execute(sql, args).fetchone()
            return None if row is None else decode(kind, row[0])

        return await (self._query(work) if reader else self._read(work))

    async def _all(self, kind: type[T], sql: str, args: tuple[object, ...], *, reader: bool = False) -> list[T]:
        def work(db: sqlite3.Connection) -> list[T]:
            return [decode(kind, r[0]) for r in db.execute(sql, args)]

        return await (self._query(work) if reader else self._read(work))
