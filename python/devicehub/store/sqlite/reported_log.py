"""Reported values on their way into the snapshot: appended to a log each flush, folded into `snapshot` now and then.

Issue 30 #1: the write-behind's flush upserted every (device, path) of its interval into `snapshot`, whose rows are
keyed by device id. While few devices notify often, a flush touches a few pages; a fleet of many devices each
notifying rarely gives every value of a flush a page of its own, and the commit writes each dirty page to the WAL:
a value cost 9.6× more at 10 000 devices than at 200 for the same event rate
(bench/micro/reported_write_bench.py). Appended to `reported_log` (no index: rows go on the last pages), a flush
writes a few pages whatever the fleet; the fold, one statement every `FOLD_S` (or `FOLD_ROWS` rows), writes each
touched snapshot page once for all the values of that time.

Durability does not change: a value is in the database file when its flush's append commits, as before. Reads lay
`values_for` (appended, not folded yet) under the write-behind's pending values. `open` folds what a crash left,
`close` folds the rest.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from devicehub.domain.model import ReportedValue
from devicehub.store.write_behind import Pending

FOLD_S = 10.0  # seconds between folds at most: each (device, path) written to `snapshot` once in this time
FOLD_ROWS = 100_000  # log rows that fold at once however recent the last fold (bounds a start-up's replay)

APPEND = "INSERT INTO reported_log (device_id, path, reported) VALUES (?, ?, ?)"
# the latest row of each (device, path) wins (rowids grow with the appends), in key order for the B-tree's sake
FOLD = (
    "INSERT INTO snapshot (device_id, path, reported) SELECT device_id, path, reported FROM reported_log"
    " WHERE rowid IN (SELECT max(rowid) FROM reported_log GROUP BY device_id, path) ORDER BY device_id, path"
    " ON CONFLICT (device_id, path) DO UPDATE SET reported = excluded.reported"
)


def fold(db: sqlite3.Connection) -> None:
    """Writer thread, inside a transaction: the log's latest values into `snapshot`, the log emptied."""
    db.execute(FOLD)
    db.execute("DELETE FROM reported_log")


class ReportedLog:
    """What the log holds and when it folds, on the event loop; `append` is the writer thread's work."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._unfolded: Pending = {}  # device id → path → latest value appended and not folded yet
        self._rows = 0  # rows appended since the last fold
        self._folded_at = clock()

    def due(self, rows: int) -> bool:
        """Whether the append of `rows` more rows folds the log too."""
        return self._rows + rows >= FOLD_ROWS or self._clock() - self._folded_at >= FOLD_S

    @staticmethod
    def append(db: sqlite3.Connection, rows: list[tuple[str, str, bytes]], folding: bool) -> None:
        db.executemany(APPEND, rows)
        if folding:
            fold(db)

    def appended(self, pending: Pending, rows: int, folded: bool) -> None:
        """After the append (and fold) of `pending` committed: writes are committed in the order they were queued, so
        a fold covers every append that completed before it."""
        if folded:
            self._unfolded, self._rows, self._folded_at = {}, 0, self._clock()
            return
        self._rows += rows
        unfolded = self._unfolded
        for device_id, values in pending.items():
            held = unfolded.get(device_id)
            if held is None:
                unfolded[device_id] = dict(values)
            else:
                held.update(values)

    def folded(self) -> None:
        """After a fold of its own (open, close) committed."""
        self._unfolded, self._rows, self._folded_at = {}, 0, self._clock()

    def values_for(self, device_id: str) -> dict[str, ReportedValue]:
        return self._unfolded.get(device_id, {})

    def holds(self, device_id: str, path: str) -> bool:
        """A value of (device, path) is in the log: a newer one must go through the log too, or the fold would put
        the older one back over it."""
        values = self._unfolded.get(device_id)
        return values is not None and path in values

    def holds_any(self) -> bool:
        return bool(self._unfolded)

    def logged(self, device_id: str) -> bool:
        """The log holds values of the device (a delete takes its rows too)."""
        return device_id in self._unfolded

    def forget(self, device_id: str) -> None:
        """After the device's rows left the log with it."""
        self._unfolded.pop(device_id, None)
