"""`SqliteStore`: the embedded default, SQLite files in WAL mode under the data directory: the main file, and
`requests.db` for the device-request queue, written by a thread in Rust that needs no GIL (store/request_file.py).

Reported values (the snapshot's hot path: one per device notification) are coalesced in memory per
(device, path) and written in one transaction every `--flush-interval-ms` (`reported_flush_s`); reads of the
snapshot and `close()` flush first, so callers read their own writes and a graceful stop loses nothing. A `kill -9`
can lose at most the values of the last flush interval — the same bound as the channel journal (README,
"Durability").

Every write runs on one dedicated writer thread (style rule 12: the event loop never blocks on disk). Writes are
combined (issue 15): those that arrive while a transaction runs wait and go into the next one together, one hand-off
to the thread and one commit for all of them; each runs inside its own savepoint, so a failing call leaves nothing
half-written and fails alone, and no caller hears its result before the transaction holding it committed. The REST
hot paths' reads (keys, accounts, devices, snapshots, subscriptions) run on a small pool of reader
threads with their own read-only connections (issue 15): WAL lets them read the last committed state while the
writer works, so a read never waits behind queued writes; every write is awaited by its caller, so a later read sees
it. Devices and snapshots once read are served from memory (store/read_cache.py), kept current by this store's own
writes. Records are kept as msgpack blobs beside the columns that queries filter on; the blobs use the same msgspec
Structs as every other backend.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from devicehub.domain.model import (
    Account,
    ApiKey,
    BootstrapConfig,
    ChannelConfig,
    ChannelDrops,
    DesiredValue,
    Device,
    DeviceRequest,
    DeviceSharedKey,
    ObservationRecord,
    PresubscriptionRule,
    RegistrationRecord,
    ReportedValue,
    SnapshotResource,
    StoredEvent,
    TrustedCa,
)
from devicehub.errors import StorageUnavailable
from devicehub.store.base import KeyClaim
from devicehub.store.device_query import DeviceQuery
from devicehub.store.endpoint_directory import EndpointDirectory
from devicehub.store.enqueue import check_enqueued
from devicehub.store.health import WriteHealth
from devicehub.store.read_cache import ReadCache
from devicehub.store.request_file import REQUESTS_FILE, RequestFile
from devicehub.store.write_behind import DEFAULT_INTERVAL_S, Pending, ReportedWriteBehind

T = TypeVar("T")
log = logging.getLogger("devicehub.store")

DB_FILE = "devicehub.sqlite3"
MAX_BATCH = 256  # writes combined into one transaction at most
READERS = 2  # reader threads (connections); reads are short point lookups, the GIL bounds what more would give

_SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY, account_id TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE, created_at REAL NOT NULL,
    data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS api_keys_account ON api_keys (account_id, created_at);
CREATE TABLE IF NOT EXISTS enrollments (endpoint_name TEXT PRIMARY KEY, account_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS devices (
    id TEXT PRIMARY KEY, account_id TEXT NOT NULL, endpoint_name TEXT NOT NULL, state TEXT NOT NULL,
    last_seen_at REAL NOT NULL, data BLOB NOT NULL, UNIQUE (account_id, endpoint_name));
CREATE INDEX IF NOT EXISTS devices_seen ON devices (last_seen_at);
CREATE TABLE IF NOT EXISTS device_ids (
    account_id TEXT NOT NULL, endpoint_name TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (account_id, endpoint_name));
CREATE TABLE IF NOT EXISTS subscriptions (
    key_id TEXT NOT NULL, device_id TEXT NOT NULL, path TEXT NOT NULL, PRIMARY KEY (key_id, device_id, path));
CREATE INDEX IF NOT EXISTS subscriptions_device ON subscriptions (device_id);
CREATE TABLE IF NOT EXISTS presubscriptions (key_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, rules BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS presubscriptions_account ON presubscriptions (account_id);
CREATE TABLE IF NOT EXISTS channels (key_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS channel_drops (
    key_id TEXT PRIMARY KEY, overflow INTEGER NOT NULL, expired INTEGER NOT NULL, failed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS channel_events (
    key_id TEXT NOT NULL, seq INTEGER NOT NULL, kind INTEGER NOT NULL, data BLOB NOT NULL,
    queued_at_ms INTEGER NOT NULL, PRIMARY KEY (key_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshot (
    device_id TEXT NOT NULL, path TEXT NOT NULL, reported BLOB, desired BLOB, subscribed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (device_id, path)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS registrations (
    device_id TEXT PRIMARY KEY, updated_at REAL NOT NULL, expires_at REAL NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS registrations_expiry ON registrations (expires_at);
CREATE TABLE IF NOT EXISTS observations (token BLOB PRIMARY KEY, device_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS observations_device ON observations (device_id);
CREATE TABLE IF NOT EXISTS shared_keys (endpoint_name TEXT PRIMARY KEY, account_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS shared_keys_account ON shared_keys (account_id, endpoint_name);
CREATE TABLE IF NOT EXISTS trusted_cas (id TEXT PRIMARY KEY, account_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS bootstrap_configs (
    endpoint_name TEXT PRIMARY KEY, account_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS bootstrap_configs_account ON bootstrap_configs (account_id, endpoint_name);
"""

# Directory columns the device list filters on (store/device_query.py), added to databases made before them
# and filled from the records; each filter has an index led by the account.
_DEVICE_COLUMNS = {
    "endpoint_type": "TEXT NOT NULL DEFAULT ''",
    "host_gateway": "TEXT NOT NULL DEFAULT ''",
    "created_at": "REAL NOT NULL DEFAULT 0",
    "updated_at": "REAL NOT NULL DEFAULT 0",
}
_DEVICE_INDEXES = """
CREATE INDEX IF NOT EXISTS devices_account ON devices (account_id, id);
CREATE INDEX IF NOT EXISTS devices_state ON devices (account_id, state, id);
CREATE INDEX IF NOT EXISTS devices_type ON devices (account_id, endpoint_type, id);
CREATE INDEX IF NOT EXISTS devices_gateway ON devices (account_id, host_gateway, id);
CREATE INDEX IF NOT EXISTS devices_created ON devices (account_id, created_at);
CREATE INDEX IF NOT EXISTS devices_updated ON devices (account_id, updated_at);
"""
_SQL_OPS = {"eq": "=", "neq": "!=", "gte": ">=", "lte": "<=", "in": "IN", "nin": "NOT IN"}

_Work = tuple[Callable[[sqlite3.Connection], Any], bool, "asyncio.Future[Any]"]  # work, keep its result, caller
_encode = msgspec.msgpack.Encoder().encode
_RULES = msgspec.msgpack.Decoder(list[PresubscriptionRule])
_DECODERS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}


def _decode(kind: type[T], data: bytes) -> T:
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.msgpack.Decoder(kind)
    value: T = decoder.decode(data)
    return value


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


def _add_device_columns(db: sqlite3.Connection) -> None:
    present = {str(row[1]) for row in db.execute("PRAGMA table_info(devices)")}
    missing = [name for name in _DEVICE_COLUMNS if name not in present]
    if not missing:
        return
    db.execute("BEGIN IMMEDIATE")  # the connection is in autocommit mode here: one explicit transaction
    try:
        for name in missing:
            db.execute(f"ALTER TABLE devices ADD COLUMN {name} {_DEVICE_COLUMNS[name]}")
        for device_id, data in db.execute("SELECT id, data FROM devices").fetchall():
            device = _decode(Device, data)
            db.execute(
                "UPDATE devices SET endpoint_type = ?, host_gateway = ?, created_at = ?, updated_at = ? WHERE id = ?",
                (device.endpoint_type, device.host_gateway, device.created_at, device.updated_at, device_id),
            )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _where(account_id: str, query: DeviceQuery) -> tuple[str, list[object]]:
    """SQL for the query's conditions; column names come from device_query's fixed lists, values are bound."""
    clauses = ["account_id = ?"]
    args: list[object] = [account_id]
    for condition in query.conditions:
        op = _SQL_OPS[condition.op]
        if condition.op in ("in", "nin"):
            marks = ", ".join("?" * len(condition.values))
            clauses.append(f"{condition.field} {op} ({marks})")
        else:
            clauses.append(f"{condition.field} {op} ?")
        args.extend(condition.values)
    return " AND ".join(clauses), args


class SqliteStore:
    """The `Store` protocol on one SQLite database file."""

    def __init__(self, data_dir: Path, *, reported_flush_s: float = DEFAULT_INTERVAL_S) -> None:
        self._path = Path(data_dir) / DB_FILE
        self._db: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._readers = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="sqlite-reader")
        self._reader_local = threading.local()
        self._reader_dbs: list[sqlite3.Connection] = []
        self._cache = ReadCache()  # devices and snapshots in memory: this process is the database's one writer
        self._reported = ReportedWriteBehind(self._write_reported, reported_flush_s)
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
            db.executescript(_SCHEMA)
            _add_device_columns(db)
            db.executescript(_DEVICE_INDEXES)
            db.isolation_level = "DEFERRED"
            self._db = db
            # devices written before device_ids existed keep their id: their rows are read last and win
            ids = [*db.execute("SELECT account_id, endpoint_name, id FROM device_ids")]
            ids += db.execute("SELECT account_id, endpoint_name, id FROM devices")
            self._directory.load(db.execute("SELECT endpoint_name, account_id FROM enrollments"), ids)

        await asyncio.get_running_loop().run_in_executor(self._thread, connect)
        await self._requests.open()
        await self._move_requests_table()

    async def close(self) -> None:
        await self._reported.close()
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

    # ---- accounts and keys ---------------------------------------------------------------------
    async def create_account(self, account: Account) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT INTO accounts (id, name, data) VALUES (?, ?, ?)", (account.id, account.name, _encode(account))
            )
        )

    async def ensure_account(self, account: Account) -> Account:
        await self._write(
            lambda db: db.execute(
                "INSERT INTO accounts (id, name, data) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING",
                (account.id, account.name, _encode(account)),
            )
        )
        found = await self.find_account_by_name(account.name)
        if found is None:  # the name's account was deleted between the two steps (no caller deletes accounts)
            raise ValueError(f"account name {account.name!r} names no account")
        return found

    async def get_account(self, account_id: str) -> Account | None:
        return await self._one(Account, "SELECT data FROM accounts WHERE id = ?", (account_id,), reader=True)

    async def find_account_by_name(self, name: str) -> Account | None:
        return await self._one(Account, "SELECT data FROM accounts WHERE name = ?", (name,))

    async def list_accounts(self) -> list[Account]:
        return await self._all(Account, "SELECT data FROM accounts ORDER BY name", ())

    async def create_key(self, key: ApiKey) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT INTO api_keys (id, account_id, key_hash, created_at, data) VALUES (?, ?, ?, ?, ?)",
                (key.id, key.account_id, key.key_hash, key.created_at, _encode(key)),
            )
        )

    async def find_key_by_hash(self, key_hash: str) -> ApiKey | None:
        return await self._one(ApiKey, "SELECT data FROM api_keys WHERE key_hash = ?", (key_hash,), reader=True)

    async def list_keys(self, account_id: str) -> list[ApiKey]:
        return await self._all(
            ApiKey, "SELECT data FROM api_keys WHERE account_id = ? ORDER BY created_at, id", (account_id,)
        )

    async def revoke_key(self, key_id: str, at: float) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT data FROM api_keys WHERE id = ?", (key_id,)).fetchone()
            if row is None:
                return False
            key = _decode(ApiKey, row[0])
            if key.revoked_at is None:
                db.execute(
                    "UPDATE api_keys SET data = ? WHERE id = ?",
                    (_encode(msgspec.structs.replace(key, revoked_at=at)), key_id),
                )
            return True

        return await self._read(work)

    # ---- enrollment and devices ----------------------------------------------------------------
    async def enroll(self, account_id: str, endpoint_name: str) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO enrollments (endpoint_name, account_id) VALUES (?, ?)",
                (endpoint_name, account_id),
            )
        )
        self._directory.enrolled_committed(endpoint_name, account_id)

    async def enrolled_account(self, endpoint_name: str) -> str | None:
        return self._directory.enrolled(endpoint_name)

    async def claim_device_id(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str:
        if not self.write_health.failing:
            return self._directory.reserve(account_id, endpoint_name, mint)
        known = self._directory.known(account_id, endpoint_name)
        if known is not None:
            return known
        candidate = mint()

        def work(db: sqlite3.Connection) -> str:
            # while writes fail the claim is written on its own, at once, as before issue 16: a full disk answers
            # the Register 5.03 (issue 14 #9) rather than holding an id that no table has
            stored = _claimed(db, account_id, endpoint_name)
            if stored is not None:
                return stored
            db.execute(
                "INSERT INTO device_ids (account_id, endpoint_name, id) VALUES (?, ?, ?)",
                (account_id, endpoint_name, candidate),
            )
            return candidate

        device_id = await self._read(work)
        self._directory.stored(account_id, endpoint_name, device_id)
        return device_id

    async def admit_authenticated(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str | None:
        owner = self._directory.enrolled(endpoint_name)
        if owner is None:
            # the first authenticated Register of a name enrols it (issue 28 #1); the row that wins is read back in
            # the same transaction, so of two credentials racing for one name (or a key being created for it) the
            # one committed first holds it and the directory learns which
            def work(db: sqlite3.Connection) -> str:
                db.execute(
                    "INSERT OR IGNORE INTO enrollments (endpoint_name, account_id) VALUES (?, ?)",
                    (endpoint_name, account_id),
                )
                row = db.execute("SELECT account_id FROM enrollments WHERE endpoint_name = ?", (endpoint_name,))
                return str(row.fetchone()[0])

            owner = await self._read(work)
            self._directory.enrolled_committed(endpoint_name, owner)
        if owner != account_id:
            return None
        return await self.claim_device_id(account_id, endpoint_name, mint)

    async def admit_endpoint(
        self, endpoint_name: str, default_account_id: str | None, mint: Callable[[], str]
    ) -> tuple[str, str] | None:
        account_id = self._directory.enrolled(endpoint_name) or default_account_id
        if account_id is None:
            return None
        return account_id, await self.claim_device_id(account_id, endpoint_name, mint)

    async def put_device(self, device: Device) -> None:
        self._cache.touch(device.id)
        self._cache.directory_changed()
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO devices (id, account_id, endpoint_name, state, last_seen_at, data,"
                " endpoint_type, host_gateway, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    device.id,
                    device.account_id,
                    device.endpoint_name,
                    device.state,
                    device.last_seen_at,
                    _encode(device),
                    device.endpoint_type,
                    device.host_gateway,
                    device.created_at,
                    device.updated_at,
                ),
            )
        )
        self._directory.stored(device.account_id, device.endpoint_name, device.id)
        self._cache.put_device(device)

    async def get_device(self, device_id: str) -> Device | None:
        device = self._cache.device(device_id)
        if device is None:
            epoch = self._cache.epoch(device_id)
            device = await self._one(Device, "SELECT data FROM devices WHERE id = ?", (device_id,), reader=True)
            if device is not None:
                self._cache.fill_device(device, epoch)
        return device

    async def get_devices(self, device_ids: Sequence[str]) -> list[Device]:
        # issue 16: a registration batch reads its devices here. Ids claimed for new names are in no table yet, and
        # devices in the read cache need no query: a storm of known devices reads nothing from SQLite
        found: list[Device] = []
        missing: list[str] = []
        for device_id in device_ids:
            if not self._directory.is_reserved(device_id):
                cached = self._cache.device(device_id)
                if cached is None:
                    missing.append(device_id)
                else:
                    found.append(cached)
        if not missing:
            return found

        def work(db: sqlite3.Connection) -> list[bytes]:
            return [row[0] for row in _rows_in(db, "SELECT data FROM devices WHERE id IN ({})", missing)]

        return found + [_decode(Device, data) for data in await self._read(work)]

    async def put_registered_devices(
        self,
        devices: Sequence[Device],
        unchanged: Sequence[str] = (),
        reported: Sequence[tuple[str, str, ReportedValue]] = (),
    ) -> None:
        # a value is written with its entry (one row write, not the empty row now and the value a flush later),
        # unless the write-behind holds an older value of it: then it goes after that one, as set_reported
        valued, later = self._reported.split_held(reported)
        with_value = {(device_id, path) for device_id, path, _ in valued} if devices else set()

        def work(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT OR REPLACE INTO devices (id, account_id, endpoint_name, state, last_seen_at, data,"
                " endpoint_type, host_gateway, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        d.id,
                        d.account_id,
                        d.endpoint_name,
                        d.state,
                        d.last_seen_at,
                        _encode(d),
                        d.endpoint_type,
                        d.host_gateway,
                        d.created_at,
                        d.updated_at,
                    )
                    for d in devices
                ],
            )
            db.executemany(
                "INSERT OR IGNORE INTO snapshot (device_id, path) VALUES (?, ?)",
                [(d.id, r.path) for d in devices for r in d.resources if (d.id, r.path) not in with_value],
            )
            if valued:
                db.executemany(
                    "INSERT INTO snapshot (device_id, path, reported) VALUES (?, ?, ?)"
                    " ON CONFLICT (device_id, path) DO UPDATE SET reported = excluded.reported",
                    [(device_id, path, _encode(value)) for device_id, path, value in valued],
                )
            # the device ids claimed for them (`_claim`) are stored with them
            db.executemany(
                "INSERT OR IGNORE INTO device_ids (account_id, endpoint_name, id) VALUES (?, ?, ?)",
                [(d.account_id, d.endpoint_name, d.id) for d in devices],
            )
            ids = [(d.id,) for d in devices] + [(device_id,) for device_id in unchanged]
            db.executemany("DELETE FROM subscriptions WHERE device_id = ?", ids)
            db.executemany("UPDATE snapshot SET subscribed = 0 WHERE device_id = ? AND subscribed != 0", ids)

        for device_id in (*(d.id for d in devices), *unchanged):  # the read cache (read_cache.py): loads racing
            self._cache.drop_subscriptions(device_id)  # this write must not fill it
        if devices:
            self._cache.directory_changed()
        await self._write(work)
        for device in devices:
            self._directory.stored(device.account_id, device.endpoint_name, device.id)  # its claim is in the tables
            self._cache.drop_subscriptions(device.id)  # the registration's write removed them (spec §2.1)
            self._cache.put_device(device)
            self._cache.ensure(device.id, [r.path for r in device.resources])
            self._cache.clear_subscribed(device.id)
        for device_id in unchanged:
            self._cache.drop_subscriptions(device_id)
            self._cache.clear_subscribed(device_id)
        for device_id, path, value in valued:
            self._cache.set_reported(device_id, path, value)
        for device_id, path, value in later:
            await self.set_reported(device_id, path, value)

    async def find_device(self, account_id: str, endpoint_name: str) -> Device | None:
        return await self._one(
            Device, "SELECT data FROM devices WHERE account_id = ? AND endpoint_name = ?", (account_id, endpoint_name)
        )

    async def list_devices(
        self,
        account_id: str,
        *,
        state: str | None = None,
        query: DeviceQuery | None = None,
        after: str | None = None,
        limit: int = 50,
        descending: bool = False,
    ) -> list[Device]:
        where, args = _where(account_id, DeviceQuery.of(query, state))
        if after is not None:
            where += " AND id < ?" if descending else " AND id > ?"
            args.append(after)
        key = (account_id, where, tuple(args), limit, descending)
        page = self._cache.listing(key)  # a page no device change has touched since it was read
        if page is not None:
            return list(page)
        epoch = self._cache.directory_epoch()
        sql = f"SELECT id FROM devices WHERE {where} ORDER BY id {'DESC' if descending else 'ASC'} LIMIT ?"
        cached = self._cache.device

        def work(db: sqlite3.Connection) -> list[Device]:
            # a cached record is what the device's last completed write stored (the cache follows each commit):
            # reading and decoding records is the listing's main cost, so only what the cache lacks is read
            devices = []
            for (device_id,) in db.execute(sql, (*args, limit)).fetchall():
                device = cached(device_id)
                if device is None:
                    row = db.execute("SELECT data FROM devices WHERE id = ?", (device_id,)).fetchone()
                    if row is None:  # deleted since the page was read
                        continue
                    device = _decode(Device, row[0])
                devices.append(device)
            return devices

        devices = await self._query(work)
        self._cache.fill_listing(key, devices, epoch)
        return list(devices)

    async def count_devices(
        self, account_id: str, *, state: str | None = None, query: DeviceQuery | None = None
    ) -> int:
        where, args = _where(account_id, DeviceQuery.of(query, state))
        return await self._query(
            lambda db: int(db.execute(f"SELECT COUNT(*) FROM devices WHERE {where}", args).fetchone()[0])
        )

    async def delete_device(self, device_id: str) -> None:
        self._cache.drop_subscriptions(device_id)
        self._cache.directory_changed()
        await self._reported.flush()
        await self._requests.remove_device(device_id)  # first: a crash between leaves a device, never its orphans

        def work(db: sqlite3.Connection) -> list[tuple[str, str]]:
            names = [
                (str(account_id), str(name))
                for table in ("device_ids", "devices")
                for account_id, name in db.execute(
                    f"SELECT account_id, endpoint_name FROM {table} WHERE id = ?", (device_id,)
                )
            ]
            for table in ("device_ids", "devices", "subscriptions", "snapshot"):
                column = "id" if table in ("devices", "device_ids") else "device_id"
                db.execute(f"DELETE FROM {table} WHERE {column} = ?", (device_id,))
            return names

        names = await self._read(work)
        self._directory.deleted(device_id, names)  # its name may mint a new id
        self._cache.forget(device_id)

    async def devices_last_seen_before(self, cutoff: float, limit: int = 1000) -> list[str]:
        return await self._read(
            lambda db: [
                str(r[0])
                for r in db.execute(
                    "SELECT id FROM devices WHERE last_seen_at < ? ORDER BY last_seen_at LIMIT ?", (cutoff, limit)
                )
            ]
        )

    # ---- live registrations and observations ----------------------------------------------------
    async def put_registration(self, registration: RegistrationRecord) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO registrations (device_id, updated_at, expires_at, data) VALUES (?, ?, ?, ?)",
                (registration.device_id, registration.updated_at, registration.expires_at, _encode(registration)),
            )
        )

    async def put_registrations(
        self,
        registrations: Sequence[RegistrationRecord],
        observations: Sequence[ObservationRecord] = (),
        fresh: Sequence[str] = (),
    ) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.executemany("DELETE FROM observations WHERE device_id = ?", [(device_id,) for device_id in fresh])
            db.executemany(
                "INSERT OR REPLACE INTO registrations (device_id, updated_at, expires_at, data) VALUES (?, ?, ?, ?)",
                [(r.device_id, r.updated_at, r.expires_at, _encode(r)) for r in registrations],
            )
            db.executemany(
                "INSERT OR REPLACE INTO observations (token, device_id, data) VALUES (?, ?, ?)",
                [(o.token, o.device_id, _encode(o)) for o in observations],
            )

        await self._write(work)

    async def get_registration(self, device_id: str) -> RegistrationRecord | None:
        return await self._one(RegistrationRecord, "SELECT data FROM registrations WHERE device_id = ?", (device_id,))

    async def list_registrations(self) -> list[RegistrationRecord]:
        return await self._all(RegistrationRecord, "SELECT data FROM registrations ORDER BY device_id", ())

    async def registrations_expiring(self, now: float, limit: int = 1000) -> list[RegistrationRecord]:
        return await self._all(
            RegistrationRecord,
            "SELECT data FROM registrations WHERE expires_at < ? ORDER BY expires_at LIMIT ?",
            (now, limit),
        )

    async def remove_registration(self, device_id: str, updated_at: float | None = None) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            sql = "DELETE FROM registrations WHERE device_id = ?"
            args: tuple[object, ...] = (device_id,)
            if updated_at is not None:
                sql, args = sql + " AND updated_at = ?", (device_id, updated_at)
            if db.execute(sql, args).rowcount == 0:
                return False
            db.execute("DELETE FROM observations WHERE device_id = ?", (device_id,))
            return True

        return await self._read(work)

    async def put_observation(self, observation: ObservationRecord) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO observations (token, device_id, data) VALUES (?, ?, ?)",
                (observation.token, observation.device_id, _encode(observation)),
            )
        )

    async def get_observation(self, token: bytes) -> ObservationRecord | None:
        return await self._one(ObservationRecord, "SELECT data FROM observations WHERE token = ?", (token,))

    async def device_observations(self, device_id: str) -> list[ObservationRecord]:
        return await self._all(
            ObservationRecord, "SELECT data FROM observations WHERE device_id = ? ORDER BY token", (device_id,)
        )

    async def remove_observation(self, token: bytes) -> None:
        await self._write(lambda db: db.execute("DELETE FROM observations WHERE token = ?", (token,)))

    # ---- resource subscriptions ------------------------------------------------------------------
    async def add_subscription(self, key_id: str, device_id: str, path: str) -> None:
        if self._cache.has_subscription(device_id, key_id, path):
            return  # stored and not removed since: the INSERT OR IGNORE would change nothing (issue 15)
        epoch = self._cache.epoch(device_id)
        await self._write(
            lambda db: db.execute(
                "INSERT OR IGNORE INTO subscriptions (key_id, device_id, path) VALUES (?, ?, ?)",
                (key_id, device_id, path),
            )
        )
        self._cache.fill_subscription(device_id, key_id, path, epoch)

    async def remove_subscription(self, key_id: str, device_id: str, path: str) -> bool:
        self._cache.drop_subscriptions(device_id)
        removed = await self._read(
            lambda db: (
                db.execute(
                    "DELETE FROM subscriptions WHERE key_id = ? AND device_id = ? AND path = ?",
                    (key_id, device_id, path),
                ).rowcount
                > 0
            )
        )
        self._cache.drop_subscriptions(device_id)
        return removed

    async def list_subscriptions(self, key_id: str, device_id: str) -> list[str]:
        return await self._query(
            lambda db: [
                str(r[0])
                for r in db.execute(
                    "SELECT path FROM subscriptions WHERE key_id = ? AND device_id = ? ORDER BY path",
                    (key_id, device_id),
                )
            ]
        )

    async def remove_device_subscriptions(self, device_id: str, key_id: str | None = None) -> int:
        sql = "DELETE FROM subscriptions WHERE device_id = ?"
        args: tuple[str, ...] = (device_id,)
        if key_id is not None:
            sql, args = sql + " AND key_id = ?", (device_id, key_id)
        self._cache.drop_subscriptions(device_id)
        removed = await self._read(lambda db: int(db.execute(sql, args).rowcount))
        self._cache.drop_subscriptions(device_id)
        return removed

    async def subscribers(self, device_id: str) -> list[tuple[str, str]]:
        return await self._read(
            lambda db: [
                (str(r[0]), str(r[1]))
                for r in db.execute(
                    "SELECT key_id, path FROM subscriptions WHERE device_id = ? ORDER BY key_id, path", (device_id,)
                )
            ]
        )

    # ---- presubscriptions ------------------------------------------------------------------------
    async def set_presubscriptions(self, key_id: str, account_id: str, rules: Sequence[PresubscriptionRule]) -> None:
        def work(db: sqlite3.Connection) -> None:
            if rules:
                db.execute(
                    "INSERT OR REPLACE INTO presubscriptions (key_id, account_id, rules) VALUES (?, ?, ?)",
                    (key_id, account_id, _encode(list(rules))),
                )
            else:
                db.execute("DELETE FROM presubscriptions WHERE key_id = ?", (key_id,))

        await self._write(work)

    async def get_presubscriptions(self, key_id: str) -> list[PresubscriptionRule]:
        def work(db: sqlite3.Connection) -> list[PresubscriptionRule]:
            row = db.execute("SELECT rules FROM presubscriptions WHERE key_id = ?", (key_id,)).fetchone()
            return [] if row is None else _RULES.decode(row[0])

        return await self._read(work)

    async def account_presubscriptions(self, account_id: str) -> list[tuple[str, list[PresubscriptionRule]]]:
        return await self._read(
            lambda db: [
                (str(r[0]), _RULES.decode(r[1]))
                for r in db.execute(
                    "SELECT key_id, rules FROM presubscriptions WHERE account_id = ? ORDER BY key_id", (account_id,)
                )
            ]
        )

    # ---- channels and their event journal ---------------------------------------------------------
    async def put_channel(self, channel: ChannelConfig) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO channels (key_id, account_id, data) VALUES (?, ?, ?)",
                (channel.key_id, channel.account_id, _encode(channel)),
            )
        )

    async def get_channel(self, key_id: str) -> ChannelConfig | None:
        return await self._one(ChannelConfig, "SELECT data FROM channels WHERE key_id = ?", (key_id,))

    async def delete_channel(self, key_id: str) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            db.execute("DELETE FROM channel_events WHERE key_id = ?", (key_id,))
            db.execute("DELETE FROM channel_drops WHERE key_id = ?", (key_id,))
            return db.execute("DELETE FROM channels WHERE key_id = ?", (key_id,)).rowcount > 0

        return await self._read(work)

    async def list_channels(self, account_id: str | None = None) -> list[ChannelConfig]:
        if account_id is None:
            return await self._all(ChannelConfig, "SELECT data FROM channels ORDER BY key_id", ())
        return await self._all(
            ChannelConfig, "SELECT data FROM channels WHERE account_id = ? ORDER BY key_id", (account_id,)
        )

    async def add_channel_drops(self, key_id: str, drops: ChannelDrops) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO channel_drops (key_id, overflow, expired, failed) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (key_id) DO UPDATE SET overflow = overflow + excluded.overflow,"
                " expired = expired + excluded.expired, failed = failed + excluded.failed",
                (key_id, drops.overflow, drops.expired, drops.failed),
            )

        await self._write(work)

    async def get_channel_drops(self, key_id: str) -> ChannelDrops:
        def work(db: sqlite3.Connection) -> ChannelDrops:
            row = db.execute(
                "SELECT overflow, expired, failed FROM channel_drops WHERE key_id = ?", (key_id,)
            ).fetchone()
            return ChannelDrops(*map(int, row)) if row else ChannelDrops()

        return await self._read(work)

    async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None:
        def work(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT MAX(seq) FROM channel_events WHERE key_id = ?", (key_id,)).fetchone()
            start = (row[0] if row[0] is not None else -1) + 1
            db.executemany(
                "INSERT INTO channel_events (key_id, seq, kind, data, queued_at_ms) VALUES (?, ?, ?, ?, ?)",
                [(key_id, start + i, e.kind, e.data, e.queued_at_ms) for i, e in enumerate(events)],
            )

        if events:
            await self._write(work)

    async def load_events(self, key_id: str) -> list[StoredEvent]:
        return await self._read(
            lambda db: [
                StoredEvent(int(r[0]), bytes(r[1]), int(r[2]))
                for r in db.execute(
                    "SELECT kind, data, queued_at_ms FROM channel_events WHERE key_id = ? ORDER BY seq", (key_id,)
                )
            ]
        )

    async def drop_head_events(self, key_id: str, count: int) -> None:
        if count <= 0:
            return
        await self._write(
            lambda db: db.execute(
                "DELETE FROM channel_events WHERE key_id = ? AND seq IN"
                " (SELECT seq FROM channel_events WHERE key_id = ? ORDER BY seq LIMIT ?)",
                (key_id, key_id, count),
            )
        )

    # ---- device-request queue (requests.db, written by the Rust thread of `request_file`) -------------------------
    async def enqueue_request(self, request: DeviceRequest, max_pending: int = 0) -> None:
        outcome = await self._requests.enqueue(
            request.key_id, request.async_id, request.device_id, _encode(request), max_pending
        )
        check_enqueued(outcome, request, max_pending)

    async def pending_requests(self, device_id: str) -> list[DeviceRequest]:
        return [_decode(DeviceRequest, data) for data in await self._requests.pending(device_id)]

    async def devices_with_pending_requests(self, device_ids: Sequence[str]) -> set[str]:
        return await self._requests.devices_with_pending(list(dict.fromkeys(device_ids)))

    async def all_pending_requests(self) -> list[DeviceRequest]:
        return [_decode(DeviceRequest, data) for data in await self._requests.all()]

    async def count_pending_requests(self) -> int:
        return await self._requests.count()

    async def find_request(self, key_id: str, async_id: str) -> DeviceRequest | None:
        data = await self._requests.find(key_id, async_id)
        return None if data is None else _decode(DeviceRequest, data)

    async def update_request(self, request: DeviceRequest) -> None:
        await self._requests.update(request.key_id, request.async_id, _encode(request))

    async def remove_request(self, key_id: str, async_id: str) -> bool:
        return await self._requests.remove(key_id, async_id)

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

    # ---- state snapshot --------------------------------------------------------------------------------
    async def set_reported(self, device_id: str, path: str, reported: ReportedValue) -> None:
        self._reported.put(device_id, path, reported)
        self._cache.set_reported(device_id, path, reported)

    async def set_reported_many(self, values: Sequence[tuple[str, str, ReportedValue]]) -> None:
        put, cache = self._reported.put, self._cache.set_reported
        for device_id, path, reported in values:
            put(device_id, path, reported)
            cache(device_id, path, reported)

    async def _write_reported(self, pending: Pending) -> None:
        rows = [
            (device_id, path, _encode(value)) for device_id, values in pending.items() for path, value in values.items()
        ]
        await self._write(
            lambda db: db.executemany(
                "INSERT INTO snapshot (device_id, path, reported) VALUES (?, ?, ?)"
                " ON CONFLICT (device_id, path) DO UPDATE SET reported = excluded.reported",
                rows,
            )
        )

    async def set_desired(self, device_id: str, path: str, desired: DesiredValue) -> None:
        self._cache.touch(device_id)
        await self._write(
            lambda db: db.execute(
                "INSERT INTO snapshot (device_id, path, desired) VALUES (?, ?, ?)"
                " ON CONFLICT (device_id, path) DO UPDATE SET desired = excluded.desired",
                (device_id, path, _encode(desired)),
            )
        )
        self._cache.update(device_id, path, desired=desired)

    async def set_subscribed(self, device_id: str, path: str, subscribed: bool) -> None:
        self._cache.touch(device_id)
        await self._write(
            lambda db: db.execute(
                "INSERT INTO snapshot (device_id, path, subscribed) VALUES (?, ?, ?)"
                " ON CONFLICT (device_id, path) DO UPDATE SET subscribed = excluded.subscribed",
                (device_id, path, int(subscribed)),
            )
        )
        self._cache.update(device_id, path, subscribed=subscribed)

    async def clear_subscribed(self, device_id: str) -> None:
        self._cache.touch(device_id)
        await self._write(lambda db: db.execute("UPDATE snapshot SET subscribed = 0 WHERE device_id = ?", (device_id,)))
        self._cache.clear_subscribed(device_id)

    async def ensure_resources(self, device_id: str, paths: Sequence[str]) -> None:
        self._cache.touch(device_id)
        await self._write(
            lambda db: db.executemany(
                "INSERT OR IGNORE INTO snapshot (device_id, path) VALUES (?, ?)", [(device_id, p) for p in paths]
            )
        )
        self._cache.ensure(device_id, paths)

    async def get_desired(self, device_id: str, path: str) -> DesiredValue | None:
        cached = self._cache.resource(device_id, path)
        if cached is not None:
            return cached.desired
        # desired values are written through (set_desired awaits its commit): a reader connection sees them
        return await self._one(
            DesiredValue,
            "SELECT desired FROM snapshot WHERE device_id = ? AND path = ? AND desired IS NOT NULL",
            (device_id, path),
            reader=True,
        )

    async def get_snapshot(self, device_id: str) -> list[SnapshotResource]:
        cached = self._cache.snapshot(device_id)
        if cached is not None:
            return cached
        epoch = self._cache.epoch(device_id)

        def work(db: sqlite3.Connection) -> list[SnapshotResource]:
            rows = db.execute(
                "SELECT path, reported, desired, subscribed FROM snapshot WHERE device_id = ? ORDER BY path",
                (device_id,),
            )
            return [
                SnapshotResource(
                    path=str(path),
                    reported=None if reported is None else _decode(ReportedValue, reported),
                    desired=None if desired is None else _decode(DesiredValue, desired),
                    subscribed=bool(subscribed),
                )
                for path, reported, desired, subscribed in rows
            ]

        # read-your-writes without flushing: the values not committed yet are laid over the rows read; when a
        # flush completed during the read, its values may have been committed after the read began: read again
        for _ in range(3):
            completed = self._reported.completed
            snapshot = await self._query(work)
            if self._reported.completed == completed:
                break
        else:  # flushes keep completing under this read (a store far behind): take the slow, certain way
            try:
                await self._reported.flush()
            except StorageUnavailable:
                pass  # served from memory: the values the store could not take are laid over what it holds
            snapshot = await self._read(work)
        unwritten = self._reported.pending_for(device_id)
        if unwritten:  # laid over the rows; a value of a path with no row yet is the row its flush will insert
            rows = {r.path: r for r in snapshot}
            for path, value in unwritten.items():
                row = rows.get(path)
                rows[path] = (
                    SnapshotResource(path=path, reported=value)
                    if row is None
                    else (msgspec.structs.replace(row, reported=value))
                )
            snapshot = [rows[path] for path in sorted(rows)]
        self._cache.fill_snapshot(device_id, snapshot, epoch)
        return snapshot

    # ---- cluster coordination (one process, but the same contract as Redis) ---------------------------
    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT owner, expires_at FROM leases WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] != owner and row[1] > now:
                return False
            db.execute(
                "INSERT OR REPLACE INTO leases (name, owner, expires_at) VALUES (?, ?, ?)",
                (name, owner, now + ttl_seconds),
            )
            return True

        return await self._read(work)

    async def release_lease(self, name: str, owner: str) -> None:
        await self._write(lambda db: db.execute("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner)))

    # ---- bootstrap configurations -------------------------------------------------------------------
    async def put_bootstrap_config(self, config: BootstrapConfig) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            name = config.endpoint_name
            owner = db.execute("SELECT account_id FROM bootstrap_configs WHERE endpoint_name = ?", (name,)).fetchone()
            enrolled = db.execute("SELECT account_id FROM enrollments WHERE endpoint_name = ?", (name,)).fetchone()
            if any(row is not None and row[0] != config.account_id for row in (owner, enrolled)):
                return False
            db.execute(
                "INSERT OR REPLACE INTO bootstrap_configs (endpoint_name, account_id, data) VALUES (?, ?, ?)",
                (name, config.account_id, _encode(config)),
            )
            return True

        return await self._read(work)

    async def get_bootstrap_config(self, endpoint_name: str) -> BootstrapConfig | None:
        return await self._one(
            BootstrapConfig, "SELECT data FROM bootstrap_configs WHERE endpoint_name = ?", (endpoint_name,)
        )

    async def list_bootstrap_configs(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[BootstrapConfig]:
        return await self._all(
            BootstrapConfig,
            "SELECT data FROM bootstrap_configs WHERE account_id = ? AND endpoint_name > ? ORDER BY endpoint_name"
            " LIMIT ?",
            (account_id, after if after is not None else "", limit),
        )

    async def delete_bootstrap_config(self, account_id: str, endpoint_name: str) -> bool:
        return await self._read(
            lambda db: (
                db.execute(
                    "DELETE FROM bootstrap_configs WHERE endpoint_name = ? AND account_id = ?",
                    (endpoint_name, account_id),
                ).rowcount
                > 0
            )
        )

    # ---- helpers --------------------------------------------------------------------------------------
    # ---- device credentials ------------------------------------------------------------------------
    async def create_shared_key(self, key: DeviceSharedKey) -> KeyClaim:
        name, account_id = key.endpoint_name, key.account_id

        def work(db: sqlite3.Connection) -> KeyClaim:
            held = db.execute("SELECT account_id FROM shared_keys WHERE endpoint_name = ?", (name,)).fetchone()
            if held is not None:
                return "exists" if held[0] == account_id else "taken"
            for table in ("enrollments", "bootstrap_configs"):
                row = db.execute(f"SELECT account_id FROM {table} WHERE endpoint_name = ?", (name,)).fetchone()
                if row is not None and row[0] != account_id:
                    return "taken"
            db.execute(
                "INSERT INTO shared_keys (endpoint_name, account_id, data) VALUES (?, ?, ?)",
                (name, account_id, _encode(key)),
            )
            db.execute(
                "INSERT OR IGNORE INTO enrollments (endpoint_name, account_id) VALUES (?, ?)", (name, account_id)
            )
            return "created"

        claim = await self._read(work)
        if claim == "created":
            self._directory.enrolled_committed(name, account_id)
        return claim

    async def get_shared_key(self, endpoint_name: str) -> DeviceSharedKey | None:
        return await self._one(
            DeviceSharedKey, "SELECT data FROM shared_keys WHERE endpoint_name = ?", (endpoint_name,)
        )

    async def list_shared_keys(
        self, account_id: str | None, *, after: str | None = None, limit: int = 1000
    ) -> list[DeviceSharedKey]:
        where, args = "endpoint_name > ?", [after or ""]
        if account_id is not None:
            where, args = where + " AND account_id = ?", [*args, account_id]
        return await self._all(
            DeviceSharedKey,
            f"SELECT data FROM shared_keys WHERE {where} ORDER BY endpoint_name LIMIT ?",
            (*args, limit),
        )

    async def delete_shared_key(self, endpoint_name: str) -> bool:
        return await self._read(
            lambda db: db.execute("DELETE FROM shared_keys WHERE endpoint_name = ?", (endpoint_name,)).rowcount > 0
        )

    async def put_trusted_ca(self, ca: TrustedCa) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO trusted_cas (id, account_id, data) VALUES (?, ?, ?)",
                (ca.id, ca.account_id, _encode(ca)),
            )
        )

    async def list_trusted_cas(self, account_id: str | None = None) -> list[TrustedCa]:
        if account_id is None:
            return await self._all(TrustedCa, "SELECT data FROM trusted_cas ORDER BY id", ())
        return await self._all(
            TrustedCa, "SELECT data FROM trusted_cas WHERE account_id = ? ORDER BY id", (account_id,)
        )

    async def delete_trusted_ca(self, ca_id: str) -> bool:
        return await self._read(lambda db: db.execute("DELETE FROM trusted_cas WHERE id = ?", (ca_id,)).rowcount > 0)

    async def _one(self, kind: type[T], sql: str, args: tuple[object, ...], *, reader: bool = False) -> T | None:
        def work(db: sqlite3.Connection) -> T | None:
            row = db.execute(sql, args).fetchone()
            return None if row is None else _decode(kind, row[0])

        return await (self._query(work) if reader else self._read(work))

    async def _all(self, kind: type[T], sql: str, args: tuple[object, ...], *, reader: bool = False) -> list[T]:
        def work(db: sqlite3.Connection) -> list[T]:
            return [_decode(kind, r[0]) for r in db.execute(sql, args)]

        return await (self._query(work) if reader else self._read(work))


def _rows_in(db: sqlite3.Connection, sql: str, values: Sequence[str]) -> list[tuple[Any, ...]]:
    """The rows of `sql`, whose `IN ({})` takes `values`, asked in chunks below SQLite's bound on host
    parameters."""
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(values), 500):
        chunk = tuple(values[start : start + 500])
        rows.extend(db.execute(sql.format(",".join("?" * len(chunk))), chunk))
    return rows


def _claimed(db: sqlite3.Connection, account_id: str, endpoint_name: str) -> str | None:
    """The stored device id of (account, name), if any."""
    # devices written before device_ids existed keep their id
    for table in ("devices", "device_ids"):
        row = db.execute(
            f"SELECT id FROM {table} WHERE account_id = ? AND endpoint_name = ?", (account_id, endpoint_name)
        )
        found = row.fetchone()
        if found is not None:
            return str(found[0])
    return None
