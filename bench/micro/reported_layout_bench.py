"""The event loop's cost of a reported value in the SQLite store's write-behind and log as the same event rate comes
from more devices (issue 30 #1): `ReportedWriteBehind.put` of each value, then at each flush the row's encoding and
`ReportedLog.appended`, at 10 000 values/s (500 a 50 ms flush) from random devices of a fleet of D, every device's
values held by the log already (as between folds); and the fold's cost per value (`start_fold` + `fold_values`, the
writer thread's, into an in-memory `snapshot`). Not the read cache's `set_reported` nor the SQLite append itself.

Each measurement runs in a child process with the code under `--old` (a checkout's `python` directory: main's
layout) or this checkout's, alternately, `--runs` times per fleet, shuffled device order so caches are cold as a
fleet's are. Prints the medians (ns per value) and each layout's `--fleets` last / first ratio; writes
bench/results/reported_layout.json.
Reproduce: `python bench/micro/reported_layout_bench.py --old ../main/python` (`--smoke`: seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "reported_layout.json"
HERE = Path(__file__).resolve()
PER_FLUSH = 500  # 10 000 values/s, a flush every 50 ms
PATH = "/3/0/9"


def measure(devices: int, flushes: int) -> dict[str, float]:
    """In this process, with whichever `devicehub` PYTHONPATH gives: ns per value of the event loop's part, and of
    the fold's."""
    from devicehub.domain.model import ReportedValue
    from devicehub.store.sqlite import reported_log
    from devicehub.store.sqlite.codec import encode
    from devicehub.store.sqlite.schema import SCHEMA
    from devicehub.store.write_behind import ReportedWriteBehind

    encode_batch = getattr(reported_log, "encode_batch", encode)  # main's row: the Pending encoded as it is
    rng = random.Random(devices)
    ids = [f"{1_795_000_000_000 + n:012x}{rng.getrandbits(80):020x}" for n in range(devices)]
    rng.shuffle(ids)
    values = [ReportedValue(value=str(n).encode(), content_type="text/plain", reported_at=float(n)) for n in range(64)]

    async def write(pending: object) -> None:
        return None

    async def run() -> dict[str, float]:
        behind = ReportedWriteBehind(write, interval=3600)
        log = reported_log.ReportedLog()
        rowid = 0

        def flush() -> None:
            nonlocal rowid
            pending, behind._pending = behind._pending, {}
            batch = encode_batch(pending)
            rowid += 1
            log.appended(pending, len(batch), False, rowid)

        for device_id in ids:  # the log holds every device's value already, as between folds
            behind.put(device_id, PATH, values[0])
        flush()
        picks = [[ids[rng.randrange(devices)] for _ in range(PER_FLUSH)] for _ in range(flushes)]
        gc.collect()
        spent = 0.0
        for n, chosen in enumerate(picks):
            value = values[n % len(values)]
            started = time.perf_counter()
            for device_id in chosen:
                behind.put(device_id, PATH, value)
            flush()
            spent += time.perf_counter() - started
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.executescript(SCHEMA)
        db.executemany("INSERT INTO snapshot (device_id, path) VALUES (?, ?)", [(d, PATH) for d in sorted(ids)])
        started = time.perf_counter()
        folding = log.start_fold()
        with db:
            reported_log.fold_values(db, folding)
        fold = time.perf_counter() - started
        return {"event_loop_ns": spent / (flushes * PER_FLUSH) * 1e9, "fold_ns": fold / devices * 1e9}

    return asyncio.run(run())


def child(python_dir: str, devices: int, flushes: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": python_dir}
    out = subprocess.run(
        [sys.executable, str(HERE), "--child", str(devices), "--flushes", str(flushes)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=False, help="the baseline's python directory (main's)")
    parser.add_argument("--fleets", default="200,50000")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--flushes", type=int, default=200, help="flushes of 500 values measured per run")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.flushes)))
        return
    if args.smoke:
        args.fleets, args.runs, args.flushes = "200,5000", 1, 20
    new = str(HERE.parents[2] / "python")
    layouts = {"new": new, **({"old": args.old} if args.old else {})}
    fleets = [int(n) for n in args.fleets.split(",")]
    samples: dict[str, dict[int, list[dict[str, float]]]] = {k: {d: [] for d in fleets} for k in layouts}
    for _ in range(args.runs):
        for devices in fleets:
            for name, directory in layouts.items():  # alternately, in the same run
                samples[name][devices].append(child(directory, devices, args.flushes))
    results = {
        name: {
            str(d): {
                key: round(statistics.median(s[key] for s in samples[name][d]), 1)
                for key in ("event_loop_ns", "fold_ns")
            }
            for d in fleets
        }
        for name in layouts
    }
    first, last = str(fleets[0]), str(fleets[-1])
    cells = []
    for name in layouts:
        r = results[name]
        loop_first, loop_last = r[first]["event_loop_ns"], r[last]["event_loop_ns"]
        loop_ratio = r[last]["event_loop_ns"] / r[first]["event_loop_ns"]
        fold_ratio = r[last]["fold_ns"] / r[first]["fold_ns"]
        cells.append(
            f"{name}: event loop {loop_first:.0f} / {loop_last:.0f} ns ({loop_ratio:.2f}x),"
            f" fold {r[first]['fold_ns']:.0f} / {r[last]['fold_ns']:.0f} ns ({fold_ratio:.2f}x)"
        )
    if not args.smoke:
        stored = {**vars(args), "old": "given" if args.old else None}  # no machine path in the results
        RESULTS.write_text(json.dumps({"args": stored, "results": results}, indent=2) + "\n")
    print(f"reported layout (ns per value, {first} / {last} devices, medians of {args.runs}): " + "; ".join(cells))


if __name__ == "__main__":
    main()
