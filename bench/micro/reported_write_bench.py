"""The snapshot's reported-value write at the fleet's shapes (issue 30 #1): what a value costs the SQLite store as the
same event rate comes from more devices.

A fresh database file with the store's pragmas (WAL, synchronous=NORMAL) and its `snapshot` table holds `--paths`
rows for each of D devices (a Pelion device's resources, as `ensure_resources` leaves them), D in `--fleets`.
`--rate` events/s in total, one value of `/3/0/9` each from a random device, are coalesced per (device, path) over
each 50 ms flush interval as the write-behind does, and written by each variant:
- `upsert`: the store's way before issue 30: one `executemany` upsert into `snapshot` a flush (the baseline);
- `upsert-sorted`: the same with the rows in key order;
- `log`: one `executemany` append to an unindexed log table a flush, folded into `snapshot` (the latest value per
  (device, path), one statement) every `--fold` seconds: a flush writes a few sequential pages, and the fold
  writes each touched snapshot page once per `--fold` seconds instead of once per flush.
The figure is this process's CPU (`time.process_time`) per event over `--seconds` of simulated time (written as
fast as it goes), so it holds on a loaded machine; `upsert` at the smallest fleet is the same-run baseline.
Random devices scatter a flush's rows over the snapshot's pages: with many devices each row dirties a page of its
own, and the commit writes every dirty page to the WAL.
Prints one summary line and writes bench/results/reported_write.json.
Reproduce: `python bench/micro/reported_write_bench.py --fleets 200,10000,50000` (`--smoke`: seconds).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from devicehub.domain.model import ReportedValue
from devicehub.store.sqlite.schema import SCHEMA

RESULTS = Path(__file__).resolve().parents[1] / "results" / "reported_write.json"
INTERVAL = 0.05  # the write-behind's flush interval (store/write_behind.py DEFAULT_INTERVAL_S)
PATH = "/3/0/9"
UPSERT = (
    "INSERT INTO snapshot (device_id, path, reported) VALUES (?, ?, ?)"
    " ON CONFLICT (device_id, path) DO UPDATE SET reported = excluded.reported"
)
encode = msgspec.msgpack.Encoder().encode
Rows = list[tuple[str, str, bytes]]


def _database(directory: Path, devices: int, paths: int) -> tuple[sqlite3.Connection, list[str]]:
    db = sqlite3.connect(directory / "bench.sqlite3", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    # time-ordered ids, as IdSource.ordered gives: milliseconds first, then randomness
    ids = [f"{1_795_000_000_000 + n:012x}{random.getrandbits(80):020x}" for n in range(devices)]
    resources = [PATH, *(f"/3/0/{r}" for r in range(100, 100 + paths - 1))]
    with db:
        db.executemany("INSERT INTO snapshot (device_id, path) VALUES (?, ?)", [(d, p) for d in ids for p in resources])
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.isolation_level = "DEFERRED"  # as the store's writer: `with db` is one transaction, not one per row
    return db, ids


def _flushes(ids: list[str], rate: float, seconds: float) -> list[Rows]:
    """Each flush's rows: the events of one interval coalesced per (device, path), the latest value kept."""
    rng = random.Random(1)
    per_flush = round(rate * INTERVAL)
    flushes = []
    for n in range(round(seconds / INTERVAL)):
        pending: dict[str, bytes] = {}
        for k in range(per_flush):
            value = ReportedValue(value=str(k).encode(), content_type="text/plain", reported_at=n * INTERVAL)
            pending[ids[rng.randrange(len(ids))]] = encode(value)
        flushes.append([(d, PATH, v) for d, v in pending.items()])
    return flushes


def upsert(db: sqlite3.Connection, rows: Rows, flush: int, fold_every: int) -> None:
    with db:
        db.executemany(UPSERT, rows)


def upsert_sorted(db: sqlite3.Connection, rows: Rows, flush: int, fold_every: int) -> None:
    rows.sort()
    with db:
        db.executemany(UPSERT, rows)


def log(db: sqlite3.Connection, rows: Rows, flush: int, fold_every: int) -> None:
    with db:
        db.executemany("INSERT INTO reported_log (device_id, path, reported) VALUES (?, ?, ?)", rows)
    if (flush + 1) % fold_every == 0:
        with db:
            db.execute(
                "INSERT INTO snapshot (device_id, path, reported) SELECT device_id, path, reported FROM reported_log"
                " WHERE rowid IN (SELECT max(rowid) FROM reported_log GROUP BY device_id, path) ORDER BY 1, 2"
                " ON CONFLICT (device_id, path) DO UPDATE SET reported = excluded.reported"
            )
            db.execute("DELETE FROM reported_log")


VARIANTS: dict[str, Callable[[sqlite3.Connection, Rows, int, int], None]] = {
    "upsert": upsert,
    "upsert-sorted": upsert_sorted,
    "log": log,
}


def run(variant: str, devices: int, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db, ids = _database(Path(tmp), devices, args.paths)
        flushes = _flushes(ids, args.rate, args.seconds)
        write, fold_every = VARIANTS[variant], max(1, round(args.fold / INTERVAL))
        events = round(args.rate * INTERVAL) * len(flushes)
        started = time.process_time()
        for n, rows in enumerate(flushes):
            write(db, rows, n, fold_every)
        if variant == "log":  # what is left in the log is folded too: every value reaches the snapshot
            with db:
                db.execute(
                    "INSERT INTO snapshot (device_id, path, reported) SELECT device_id, path, reported"
                    " FROM reported_log WHERE rowid IN (SELECT max(rowid) FROM reported_log GROUP BY device_id, path)"
                    " ON CONFLICT (device_id, path) DO UPDATE SET reported = excluded.reported"
                )
        cpu = time.process_time() - started
        db.close()
    return {"cpu_us_per_event": round(cpu / events * 1e6, 3), "rows_per_flush": sum(map(len, flushes)) / len(flushes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleets", default="200,10000,50000")
    parser.add_argument("--rate", type=float, default=10_000.0, help="events per second in total")
    parser.add_argument("--seconds", type=float, default=10.0, help="simulated seconds of events")
    parser.add_argument("--paths", type=int, default=19, help="snapshot rows per device")
    parser.add_argument("--fold", type=float, default=10.0, help="`log`: seconds between folds (reported_log.FOLD_S)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.fleets, args.seconds = "200,2000", 1.0
    fleets = [int(n) for n in args.fleets.split(",")]
    results = {variant: {str(d): run(variant, d, args) for d in fleets} for variant in VARIANTS}
    base = results["upsert"][str(fleets[0])]["cpu_us_per_event"]
    out = {"args": vars(args), "results": results, "machine": platform.machine()}
    if not args.smoke:
        RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    cells = "; ".join(
        f"{variant} " + ", ".join(f"{d:,}: {results[variant][str(d)]['cpu_us_per_event']:.2f} µs" for d in fleets)
        for variant in VARIANTS
    )
    print(f"reported write ({args.rate:,.0f} events/s, CPU per event; upsert at {fleets[0]} = {base:.2f} µs): {cells}")


if __name__ == "__main__":
    main()
