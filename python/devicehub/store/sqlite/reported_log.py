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
codec (`reported_batches.data`: path → device id → the value since the sixteenth session's issue 30 #1 work, device
id → path → the value before; its bytes as the snapshot keeps them), and the fold
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

import heapq
import sqlite3
import time
from collections.abc import Callable
from itertools import repeat

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

# Issue 30 #1: a row is `[ROW_FORMAT, {path: {device id: value}}]` (the write-behind's `Pending`, keyed by path); a
# row of an earlier release is the map `{device id: {path: value}}`, which a data directory may hold after a crash
ROW_FORMAT = 2
# each value left encoded (msgspec.Raw: a slice of the row, the bytes `codec.encode` gives the value alone), so the
# fold writes a value's bytes without decoding them
_Values = dict[str, dict[str, msgspec.Raw]]
_BATCH = msgspec.msgpack.Decoder(tuple[int, _Values] | _Values)


def encode_batch(pending: Pending) -> bytes:
    """A flush's row: one call into msgspec, a map per path (not per device) whatever the fleet."""
    return encode((ROW_FORMAT, pending))


def fold(db: sqlite3.Connection) -> None:
    """Writer thread, inside a transaction: the log's latest values into `snapshot`, the log emptied."""
    latest: _Values = {}  # device id → path → value
    for data, deleted in db.execute("SELECT data, deleted FROM reported_batches ORDER BY rowid"):
        if data is None:
            latest.pop(deleted, None)  # the device was deleted after these values: none goes back
            continue
        batch = _BATCH.decode(data)
        if isinstance(batch, tuple):  # path → device id → value
            for path, devices in batch[1].items():
                for device_id, value in devices.items():
                    held = latest.get(device_id)
                    if held is None:
                        latest[device_id] = {path: value}
                    else:
                        held[path] = value
            continue
        for device_id, values in batch.items():  # an earlier release's row: device id → path → value
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


Folding = tuple[Pending, int]  # the latest values of the log's rows up to a rowid (path → device id), and that rowid


def fold_values(db: sqlite3.Connection, folding: Folding) -> None:
    """Writer thread, inside a transaction: the values the event loop held for the log's rows up to `upto` into
    `snapshot` (encoded here, in key order for the B-tree's sake), and those rows deleted; rows after stay."""
    latest, upto = folding
    deleted = {str(device_id) for (device_id,) in db.execute(TOMBSTONES_AFTER, (upto,))}
    # in (device id, path) order: each path's devices sorted (a list of the strings held already), merged
    keys = heapq.merge(*(zip(sorted(devices), repeat(path)) for path, devices in sorted(latest.items())))
    # rows made as `executemany` binds them, each gone before the next (issue 30 #2): a list of a fold's rows (50 000
    # tuples at 50 000 devices) set off a young collection of the whole process and was promoted into the old ones
    rows = ((device_id, path, encode(latest[path][device_id])) for device_id, path in keys if device_id not in deleted)
    db.executemany(UPSERT, rows)
    db.execute(DELETE_UPTO, (upto,))


def fold_legacy(db: sqlite3.Connection) -> None:
    """Writer thread, at open, before `fold`: a log of a row per value left by a crash of an earlier release."""
    db.execute(LEGACY_FOLD)
    db.execute("DELETE FROM reported_log")


class ReportedLog:
    """What the log holds and when it folds, on the event loop; `append` and the fold are the writer thread's work.
    Its values are the write-behind's layout, path → device id → value (write_behind.py): a flush merges into them
    with a `dict.update` per path, and a read of one device looks under each path."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._unfolded: Pending = {}  # path → device id → latest value appended and not folded yet
        self._folding: Pending | None = None  # the values of a fold in flight (older than `_unfolded`'s)
        self._upto = 0  # the rowid of the last append in `_unfolded` (appends complete in rowid order)
        self._entries = 0  # (device, path, flush) entries appended since the last fold
        self._bytes = 0  # encoded bytes appended since the last fold
        self._folded_at = clock()

    def due(self, entries: int, size: int) -> bool:
        """Whether the append of a flush of `entries` values, `size` bytes encoded, folds the log too."""
        if self._folding is not None or not self._unfolded:  # one fold at a time; nothing to fold
            return False
        if self._bytes + size >= FOLD_BYTES:
            return True
        elapsed = self._clock() - self._folded_at
        if elapsed >= FOLD_MAX_S:
            return True
        # the (device, path) pairs a fold would write: a device that sends its paths together counts each flush
        # once per path, as it counts once per path here
        held = sum(map(len, self._unfolded.values()))
        return elapsed >= FOLD_S and self._entries + entries >= FOLD_PER_DEVICE * held

    def start_fold(self) -> Folding:
        """The fold of what the log holds, for the writer thread; appends completing meanwhile start a new count."""
        folding = self._folding = self._unfolded
        self._unfolded, self._entries, self._bytes = {}, 0, 0
        # a copy for the thread (C speed, once a fold): `forget` takes a deleted device out of `_folding` meanwhile
        return {path: dict(devices) for path, devices in folding.items()}, self._upto

    def fold_failed(self) -> None:
        """The fold's transaction did not commit: its values are the log's again, under those appended since."""
        folding, self._folding = self._folding or {}, None
        for path, devices in self._unfolded.items():
            held = folding.get(path)
            if held is None:
                folding[path] = devices
            else:
                held.update(devices)  # `_folding`'s own dicts: the thread was given copies
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
        self._bytes += size
        unfolded = self._unfolded
        for path, devices in pending.items():
            self._entries += len(devices)
            held = unfolded.get(path)
            if held is None:
                unfolded[path] = devices  # the write-behind let go of it: a flushed batch is not used again
            else:
                held.update(devices)  # the flush's values of the path at once, in C

    def folded(self) -> None:
        """After a fold of the whole log committed (open's from the rows, close's from memory): it is empty."""
        self._unfolded, self._folding, self._upto = {}, None, 0
        self._entries, self._bytes, self._folded_at = 0, 0, self._clock()

    def values_for(self, device_id: str) -> dict[str, ReportedValue]:
        values: dict[str, ReportedValue] = {}
        for layer in (self._folding or {}, self._unfolded):  # the fold's values are the older
            for path, devices in layer.items():
                value = devices.get(device_id)
                if value is not None:
                    values[path] = value
        return values

    def holds(self, device_id: str, path: str) -> bool:
        """A value of (device, path) is in the log: a newer one must go through the log too, or the fold would put
        the older one back over it (or, while it is in flight, the read would)."""
        if device_id in self._unfolded.get(path, ()):
            return True
        folding = self._folding
        return folding is not None and device_id in folding.get(path, ())

    def holds_any(self) -> bool:
        return bool(self._unfolded) or bool(self._folding)

    def logged(self, device_id: str) -> bool:
        """The log holds values of the device (its delete appends a tombstone so that no fold puts them back)."""
        return any(
            device_id in devices for layer in (self._unfolded, self._folding or {}) for devices in layer.values()
        )

    def forget(self, device_id: str) -> None:
        """After the device's tombstone was appended with its delete."""
        for layer in (self._unfolded, self._folding or {}):
            for path, devices in list(layer.items()):
                if devices.pop(device_id, None) is not None and not devices:
                    del layer[path]  # no empty dict left: `holds_any` and `due` see an empty log as empty

    def covering(self) -> Folding:
        """`close`'s fold, nothing in flight: what the log holds, to its last append."""
        # copies, as `start_fold`'s: the thread looks values up while a delete may `forget` one meanwhile
        return {path: dict(devices) for path, devices in self._unfolded.items()}, self._upto
