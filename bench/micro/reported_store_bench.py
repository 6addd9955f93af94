"""The SQLite store's reported-value path end to end at the fleet's shapes (issue 30 #2): what an event costs the
store, from `set_reported_many` to its value's fold into `snapshot`, as the same event rate comes from more devices.

A fresh `SqliteStore` holds `--paths` snapshot rows for each of D devices (D in `--fleets`); `--rate` events/s in
total, one value of `/3/0/9` each, the devices taking turns (each at `--rate / D` per second), go through the
store's own write-behind, log and folds: every 50 ms of simulated time (the write-behind's interval) the interval's
values are handed to `set_reported_many` and flushed, and the log's clock moves 50 ms, so its folds fall due as they
would at that rate. The figure is this process's CPU (`time.process_time`, the writer thread's included) per event
over `--seconds` of simulated time, written as fast as it goes, so it holds on a loaded machine. Comparing two trees:
run it with each tree's `python/` in `PYTHONPATH` (bench/micro/reported_write_bench.py has the SQLite statements
alone). Prints one summary line and writes bench/results/reported_store.json.
Reproduce: `python bench/micro/reported_store_bench.py --fleets 200,10000,50000 --seconds 60` (`--smoke`: seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import random
import sqlite3
import tempfile
import time
from pathlib import Path

from devicehub.domain.model import ReportedValue
from devicehub.store.sqlite.store import SqliteStore

RESULTS = Path(__file__).resolve().parents[1] / "results" / "reported_store.json"
INTERVAL = 0.05  # the write-behind's flush interval (store/write_behind.py DEFAULT_INTERVAL_S)
PATH = "/3/0/9"


async def run(devices: int, args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp))
        await store.open()
        try:
            # time-ordered ids, as IdSource.ordered gives: milliseconds first, then randomness
            ids = [f"{1_795_000_000_000 + n:012x}{random.getrandbits(80):020x}" for n in range(devices)]
            resources = [PATH, *(f"/3/0/{r}" for r in range(100, 100 + args.paths - 1))]

            def fill(db: sqlite3.Connection) -> None:
                db.executemany(
                    "INSERT INTO snapshot (device_id, path) VALUES (?, ?)", [(d, p) for d in ids for p in resources]
                )

            await store._write(fill)
            await store._write(lambda db: db.execute("PRAGMA wal_checkpoint(TRUNCATE)"))
            now = [0.0]
            store._log._clock = lambda: now[0]  # simulated time: the folds fall due as at `--rate`
            store._log._folded_at = 0.0
            per_flush = round(args.rate * INTERVAL)
            flushes, k = [], 0
            for n in range(round(args.seconds / INTERVAL)):
                batch = []
                for _ in range(per_flush):
                    value = ReportedValue(value=str(k).encode(), content_type="text/plain", reported_at=n * INTERVAL)
                    batch.append((ids[k % devices], PATH, value))
                    k += 1
                flushes.append(batch)
            gc.collect()
            started = time.process_time()
            for batch in flushes:
                await store.set_reported_many(batch)
                await store._reported.flush()
                now[0] += INTERVAL
            cpu = time.process_time() - started
        finally:
            await store.close()
    return cpu / (per_flush * len(flushes)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleets", default="200,10000,50000")
    parser.add_argument("--rate", type=float, default=10_000.0, help="events per second in total")
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds of events")
    parser.add_argument("--paths", type=int, default=19, help="snapshot rows per device")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.fleets, args.seconds = "200,2000", 1.0
    fleets = [int(n) for n in args.fleets.split(",")]
    results = {str(d): round(asyncio.run(run(d, args)), 3) for d in fleets}
    if not args.smoke:
        out = {"args": vars(args), "cpu_us_per_event": results, "machine": platform.machine()}
        RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    base = results[str(fleets[0])]
    cells = ", ".join(f"{d:,}: {results[str(d)]:.2f} µs ({results[str(d)] / base:.2f}×)" for d in fleets)
    print(f"reported store ({args.rate:,.0f} events/s, {args.seconds:g} s, CPU per event through the store): {cells}")


if __name__ == "__main__":
    main()
