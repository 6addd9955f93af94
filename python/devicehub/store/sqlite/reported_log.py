"""Reported values on their way into the snapshot: each flush appended to a log as one row, folded into `snapshot`
now and then.

Issue 30 #1: the write-behind's flush upserted every (device, path) of its interval into `snapshot`, whose rows are
keyed by device id. While few devices notify often, a flush touches a few pages; a fleet of many devices each
notifying rarely gives every value of a flush a page of its own, and the commit writes each dirty page to the WAL:
a value cost 9.6× more at 10 000 devices than at 200 for the same event rate
(bench/micro/reported_write_bench.py). Appended to a log, a flush writes a few sequential pages whatever the fleet;
the fold writes each touched snapshot page once for all the values of that time.

Issue 30 #2: the log held a row per value (an `executemany` of one tuple and one encoded value each, then a
`GROUP BY` over them all at each fold), which is a row per event when devices notify rarely and ~0.4 per event when
a few devices' values coalesce within a flush: a flush is now one row, its `Pending` encoded whole by the store's
codec (`reported_batches.data`: device id → path → the value, its bytes as the snapshot keeps them), and the fold
reads the rows back in order, keeps the latest value of each (device, path) and upserts only those, in key order.
What a fold writes grows with the devices whose values the log holds, not with the values: it falls due once the
log holds `FOLD_PER_DEVICE` flushed entries per such device (and `FOLD_S` passed), so each snapshot page it writes
is paid for by as many values whatever the fleet; `FOLD_MAX_S` and `FOLD_BYTES` bound the log (a start-up's
replay, the file's size).

Issue 30 #1: the fold read the rows back and merged them per entry in Python (~0.9 µs an entry at 10 000 devices,
200 000 entries in a fold of 20 s, contending with the event loop for the GIL), when the event loop already holds
their outcome: `_unfolded`, the latest value of each (device, path) appended. A fold is now written from that
(`fold_values`): its values are handed to the writer thread at the flush that folds (`start_fold`, the flushes whose
append completed: the prefix of the log up to the last rowid they were given), encoded and upserted there, and the
log's rows deleted up to that rowid only, so a flush in flight (appended after, not in `_unfolded` yet) keeps its row
and is folded next time; the folding flush's own row stays too. A tombstone appended after that rowid (a delete
queued before the fold) keeps its device's values out of it. Until the fold commits, its values stay readable
(`_folding`, under the values appended since).

Durability does not change: a value is in the database file when its flush's append commits, as before. Reads lay
`values_for` (appended, not folded yet) under the write-behind's pending values. A deleted device's values stay in
the rows that hold them: its delete appends a tombstone row (`deleted`), and a fold drops the values before it. `open`
folds what a crash left from the rows (`fold`), `close` folds the rest from memory.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

import msgspec

from devicehub.domain.model import ReportedValue
from devicehub.store.sqlite.codec import encode
from devicehub.store.write_behind import Pending

FOLD_S = 10.0  # seconds between folds at least, unless the log grows past FOLD_BYTES
FOLD_PER_DEVICE = 20  # flushed entries per logged device (on average) before a fold: its pages are paid for
# Both bounds leave a fleet of 50 000 devices × 0.2/s (10 000 values/s, ~123 bytes each encoded: the device id is in
# each entry) its FOLD_PER_DEVICE entries per device, 100 s and ~120 MB (issue 30 #2): at 60 s and 32 MiB it folded
# after 5.5, so each snapshot page a fold writes was paid for by 3.6× fewer values than at 10 000 devices.
FOLD_MAX_S = 120.0  # seconds between folds at most: a fleet that notifies rarely still reaches `snapshot`
FOLD_BYTES = 128 * 1024 * 1024  # encoded values that fold at once however recent the last fold (bounds a replay)

APPEND = "INSERT INTO reported_batches (data) VALUES (?)"
TOMBSTONE = "INSERT INTO reported_batches (deleted) VALUES (?)"
UPSERT = (
    "INSERT INTO snapshot (device_id, path, reported) VALUES (?, ?, ?)"
    " ON CONFLICT (device_id, path) DO UPDATE SET reported = excluded.reported"
)
# the tombstones appended after a fold's last rowid: deletes queued before the fold, which ran before it
TOMBSTONES_AFTER = "SELECT deleted FROM reported_batches WHERE rowid > ? AND deleted IS NOT NULL"
DELETE_UPTO = "DELETE FROM reported_batches WHERE rowid <= ?"
# the log before issue 30 #2 (a row per value), which a data directory of then may hold after a crash: the latest
# row of each (device, path) wins (rowids grow with the appends), in key order for the B-tree's sake
LEGACY_FOLD = (
    "INSERT INTO snapshot (device_id, path, reported) SELECT device_id, path, reported FROM reported_log"
    " WHERE rowid IN (SELECT max(rowid) FROM reported_log GROUP BY device_id, path) ORDER BY device_id, path"
    " ON CONFLICT (device_id, path) DO UPDATE SET reported = excluded.reported"
)

# each value left encoded (msgspec.Raw: a slice of the row, the bytes `codec.encode` gives the value alone), so the
# fold writes a value's bytes without decoding them
_BATCH = msgspec.msgpack.Decoder(dict[str, dict[str, msgspec.Raw]])


def fold(db: sqlite3.Connection) -> None:
    """Writer thread, inside a transaction: the log's latest values into `snapshot`, the log emptied."""
    latest: dict[str, dict[str, msgspec.Raw]] = {}
    for data, deleted in db.execute("SELECT data, deleted FROM reported_batches ORDER BY rowid"):
        if data is None:
            latest.pop(deleted, None)  # the device was deleted after these values: none goes back
            continue
        for device_id, values in _BATCH.decode(data).items():
            held = latest.get(device_id)
            if held is None:
                latest[device_id] = values
            else:
                held.update(values)
    if latest:
        db.executemany(
            UPSERT,
            [
                (device_id, path, bytes(latest[device_id][path]))
                for device_id in sorted(latest)
                for path in sorted(latest[device_id])
            ],
        )
    db.execute("DELETE FROM reported_batches")


Folding = tuple[Pending, int]  # the latest values of the log's rows up to a rowid, and that rowid


def fold_values(db: sqlite3.Connection, folding: Folding) -> None:
    """Writer thread, inside a transaction: the values the event loop held for the log's rows up to `upto` into
    `snapshot` (encoded here, in key order for the B-tree's sake), and those rows deleted; rows after stay."""
    latest, upto = folding
    deleted = {str(device_id) for (device_id,) in db.execute(TOMBSTONES_AFTER, (upto,))}
    # rows made as `executemany` binds them, each gone before the next (issue 30 #2): a list of a fold's rows (50 000
    # tuples at 50 000 devices) set off a young collection of the whole process and was promoted into the old ones
    rows = (
        (device_id, path, encode(value))
        for device_id in sorted(latest)
        if device_id not in deleted
        for path, value in sorted(latest[device_id].items())
    )
    db.executemany(UPSERT, rows)
    db.execute(DELETE_UPTO, (upto,))


def fold_legacy(db: sqlite3.Connection) -> None:
    """Writer thread, at open, before `fold`: a log of a row per value left by a crash of an earlier release."""
    db.execute(LEGACY_FOLD)
    db.execute("DELETE FROM reported_log")


class ReportedLog:
    """What the log holds and when it folds, on the event loop; `append` and the fold are the writer thread's work."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._unfolded: Pending = {}  # device id → path → latest value appended and not folded yet
        self._folding: Pending | None = None  # the values of a fold in flight (older than `_unfolded`'s)
        self._upto = 0  # the rowid of the last append in `_unfolded` (appends complete in rowid order)
        self._entries = 0  # (device, flush) entries appended since the last fold
        self._bytes = 0  # encoded bytes appended since the last fold
        self._folded_at = clock()

    def due(self, entries: int, size: int) -> bool:
        """Whether the append of a flush of `entries` devices' values, `size` bytes encoded, folds the log too."""
        if self._folding is not None or not self._unfolded:  # one fold at a time; nothing to fold
            return False
        if self._bytes + size >= FOLD_BYTES:
            return True
        elapsed = self._clock() - self._folded_at
        if elapsed >= FOLD_MAX_S:
            return True
        return elapsed >= FOLD_S and self._entries + entries >= FOLD_PER_DEVICE * len(self._unfolded)

    def start_fold(self) -> Folding:
        """The fold of what the log holds, for the writer thread; appends completing meanwhile start a new count."""
        folding = self._folding = self._unfolded
        self._unfolded, self._entries, self._bytes = {}, 0, 0
        # a copy for the thread (C speed): `forget` takes a deleted device out of `_folding` meanwhile. The inner
        # dicts are shared and left alone: `appended` only updates `_unfolded`'s, which are new from here on
        return dict(folding), self._upto

    def fold_failed(self) -> None:
        """The fold's transaction did not commit: its values are the log's again, under those appended since."""
        folding, self._folding = self._folding or {}, None
        for device_id, values in self._unfolded.items():
            held = folding.get(device_id)
            folding[device_id] = values if held is None else {**held, **values}  # held may still be the thread's
        self._unfolded = folding

    @staticmethod
    def append(db: sqlite3.Connection, batch: bytes, folding: Folding | None) -> int:
        """Writer thread: the flush's row, then the fold if one is due (it covers rows before this one only)."""
        rowid = db.execute(APPEND, (batch,)).lastrowid
        if folding is not None:
            fold_values(db, folding)
        return int(rowid or 0)

    def appended(self, pending: Pending, size: int, folded: bool, rowid: int = 0) -> None:
        """After the append (and fold) of `pending` committed as row `rowid`: writes are committed in the order they
        were queued, so an append completes after every append before it."""
        if folded:
            self._folding, self._folded_at = None, self._clock()
        self._upto = max(self._upto, rowid)
        self._entries += len(pending)
        self._bytes += size
        unfolded = self._unfolded
        for device_id, values in pending.items():
            held = unfolded.get(device_id)
            if held is None:
                unfolded[device_id] = values  # the write-behind let go of it: a flushed batch is not used again
            else:
                held.update(values)

    def folded(self) -> None:
        """After a fold of the whole log committed (open's from the rows, close's from memory): it is empty."""
        self._unfolded, self._folding, self._upto = {}, None, 0
        self._entries, self._bytes, self._folded_at = 0, 0, self._clock()

    def values_for(self, device_id: str) -> dict[str, ReportedValue]:
        folding = self._folding
        if folding is None or device_id not in folding:
            return self._unfolded.get(device_id, {})
        return {**folding[device_id], **self._unfolded.get(device_id, {})}  # the fold's values are the older

    def holds(self, device_id: str, path: str) -> bool:
        """A value of (device, path) is in the log: a newer one must go through the log too, or the fold would put
        the older one back over it (or, while it is in flight, the read would)."""
        values = self._unfolded.get(device_id)
        if values is not None and path in values:
            return True
        folding = self._folding
        return folding is not None and path in folding.get(device_id, ())

    def holds_any(self) -> bool:
        return bool(self._unfolded) or bool(self._folding)

    def logged(self, device_id: str) -> bool:
        """The log holds values of the device (its delete appends a tombstone so that no fold puts them back)."""
        return device_id in self._unfolded or (self._folding is not None and device_id in self._folding)

    def forget(self, device_id: str) -> None:
        """After the device's tombstone was appended with its delete."""
        self._unfolded.pop(device_id, None)
        if self._folding is not None:
            self._folding.pop(device_id, None)

    def covering(self) -> Folding:
        """`close`'s fold, nothing in flight: what the log holds, to its last append."""
        return dict(self._unfolded), self._upto
