"""The embedded store's contacts write at 50 000 devices (issue 30 #1): what `SqliteStore.put_contacts` of a whole
fleet costs the writer thread and the event loop.

Every 30 s ContactBook.write hands the store the last contact of each device contacted since, WRITE_BATCH (5 000)
devices a call, in the order the fleet talked. At 50 000 devices × 0.2/s that is all of them every 30 s. Each run
opens a real `SqliteStore` in a fresh data directory, stores `--devices` devices' contacts (time-ordered ids, as
`IdSource.ordered` gives, one account), then `--rounds` times hands it every device's later contact, shuffled, in
calls of `--batch`, each awaited as ContactBook does. Per round: the writer thread's CPU (its
`/proc/self/task/<tid>/schedstat`: time on a CPU) and the event loop's (`time.thread_time` of the main thread) over
the calls; making the tuples is ContactBook's and is not counted. The event loop does nothing else meanwhile: its
figure is what the calls cost it (the hand-over to the writer thread and back), not the GIL it waits for while the
writer binds rows (a busy loop's extra CPU, its work less the same work measured alone, was noise at this size).

Two trees compare in one run: this file's own (`python/` next to `bench/`) and `--baseline DIR` (another checkout's
`python/`, e.g. main's), each run in a child process with its `PYTHONPATH`, alternately (ABBA) `--runs` times; the
figures are the medians over all rounds, the baseline's the same-run reference. Which schema a tree writes is its
own (an old tree makes the old table).

`--options` instead times the choices on plain SQLite (the store's pragmas, its statement, 50 000 rows, the same
shuffled calls; the writer's CPU is the whole process here): the rowid table against WITHOUT ROWID, each batch
in arrival order or sorted by device id (the sort counted), a larger page cache, the upsert's update only when
later (`WHERE`), one JSON parameter for the whole batch (`json_each`: one statement, no per-row binding), and the
whole 50 000 sorted before being cut into calls (what ContactBook could do).
Prints one summary line and writes bench/results/contacts_write.json (`--options`: contacts_write_options.json).
Reproduce: `python bench/micro/contacts_write_bench.py --baseline ../main/python` (`--smoke`: 5 000 devices, seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
OWN_TREE = Path(__file__).resolve().parents[2] / "python"
ACCOUNT = "0" * 32
START = 1_800_000_000.0


def _ids(devices: int, rng: random.Random) -> list[str]:
    # time-ordered ids, as IdSource.ordered gives: milliseconds first, then randomness
    return [f"{1_795_000_000_000 + n:012x}{rng.getrandbits(80):020x}" for n in range(devices)]


def _schedstat_ns(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/schedstat") as stat:
        return int(stat.read().split()[0])


async def _child(args: argparse.Namespace) -> dict[str, list[float]]:
    from devicehub.store.sqlite.store import SqliteStore

    rng = random.Random(1)
    ids = _ids(args.devices, rng)
    rounds: dict[str, list[float]] = {"writer_ms": [], "loop_ms": [], "wall_ms": []}
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp))
        await store.open()
        try:
            for start in range(0, len(ids), args.batch):
                await store.put_contacts([(ACCOUNT, d, START) for d in ids[start : start + args.batch]])
            await store._read(lambda db: db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
            writer = await asyncio.get_running_loop().run_in_executor(store._thread, threading.get_native_id)
            for n in range(args.rounds):
                contacts = [(ACCOUNT, d, START + 30.0 * (n + 1) + rng.random()) for d in ids]
                rng.shuffle(contacts)
                calls = [contacts[s : s + args.batch] for s in range(0, len(contacts), args.batch)]
                wall, loop, thread = time.perf_counter(), time.thread_time(), _schedstat_ns(writer)
                for call in calls:
                    await store.put_contacts(call)
                rounds["loop_ms"].append((time.thread_time() - loop) * 1e3)
                rounds["writer_ms"].append((_schedstat_ns(writer) - thread) / 1e6)
                rounds["wall_ms"].append((time.perf_counter() - wall) * 1e3)
            stored = await store.get_contacts(ACCOUNT, ids[:1000])
            assert all(t > START + 30.0 * args.rounds for t in stored.values()) and len(stored) == 1000
        finally:
            await store.close()
    return rounds


def _trees(args: argparse.Namespace) -> dict[str, dict[str, object]]:
    trees = {"new": str(OWN_TREE)} | ({"baseline": args.baseline} if args.baseline else {})
    order = list(trees)
    collected: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for run in range(args.runs):
        for name in order if run % 2 == 0 else order[::-1]:  # ABBA: neither tree always runs first
            child = [sys.executable, __file__, "--child", "--devices", str(args.devices), "--batch", str(args.batch)]
            env = os.environ | {"PYTHONPATH": trees[name]}
            out = subprocess.run([*child, "--rounds", str(args.rounds)], env=env, check=True, capture_output=True)
            for key, values in json.loads(out.stdout).items():
                collected[name].setdefault(key, []).extend(values)
    return {
        name: {**{k: round(statistics.median(v), 1) for k, v in got.items()}, "rounds": got}
        for name, got in collected.items()
    }


OLD_TABLE = (
    "CREATE TABLE device_contacts (device_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, contact_at REAL NOT NULL)"
)
KEYED_TABLE = OLD_TABLE + " WITHOUT ROWID"
UPSERT = (
    "INSERT INTO device_contacts (device_id, account_id, contact_at) VALUES (?2, ?1, ?3)"
    " ON CONFLICT (device_id) DO UPDATE SET contact_at = max(contact_at, excluded.contact_at)"
)
UPSERT_LATER = (
    "INSERT INTO device_contacts (device_id, account_id, contact_at) VALUES (?2, ?1, ?3)"
    " ON CONFLICT (device_id) DO UPDATE SET contact_at = excluded.contact_at WHERE excluded.contact_at > contact_at"
)
UPSERT_JSON = (
    "INSERT INTO device_contacts (device_id, account_id, contact_at)"
    " SELECT value->>1, value->>0, value->>2 FROM json_each(?) ORDER BY 1"
    " ON CONFLICT (device_id) DO UPDATE SET contact_at = max(contact_at, excluded.contact_at)"
)
Rows = list[tuple[str, str, float]]
_DEVICE = itemgetter(1)


def _as_they_come(db: sqlite3.Connection, rows: Rows) -> None:
    db.executemany(UPSERT, rows)


def _sorted(db: sqlite3.Connection, rows: Rows) -> None:
    db.executemany(UPSERT, sorted(rows, key=_DEVICE))


def _sorted_later(db: sqlite3.Connection, rows: Rows) -> None:
    db.executemany(UPSERT_LATER, sorted(rows, key=_DEVICE))


def _json(db: sqlite3.Connection, rows: Rows) -> None:
    db.execute(UPSERT_JSON, (json.dumps(rows),))


# name: (table, write, cache_size pragma or 0, the whole fleet sorted before it is cut into calls)
OPTIONS: dict[str, tuple[str, Callable[[sqlite3.Connection, Rows], None], int, bool]] = {
    "rowid, arrival order (main)": (OLD_TABLE, _as_they_come, 0, False),
    "rowid, sorted": (OLD_TABLE, _sorted, 0, False),
    "rowid, arrival order, 16 MB cache": (OLD_TABLE, _as_they_come, -16_000, False),
    "keyed, arrival order": (KEYED_TABLE, _as_they_come, 0, False),
    "keyed, sorted (new)": (KEYED_TABLE, _sorted, 0, False),
    "keyed, sorted, 16 MB cache": (KEYED_TABLE, _sorted, -16_000, False),
    "keyed, sorted, update only when later": (KEYED_TABLE, _sorted_later, 0, False),
    "keyed, one JSON parameter, sorted in SQL": (KEYED_TABLE, _json, 0, False),
    "keyed, sorted, whole fleet sorted first": (KEYED_TABLE, _sorted, 0, True),
}


def _option(name: str, args: argparse.Namespace) -> float:
    table, write, cache, whole = OPTIONS[name]
    rng = random.Random(1)
    ids = _ids(args.devices, rng)
    spent = []
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "bench.sqlite3", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        if cache:
            db.execute(f"PRAGMA cache_size={cache}")
        db.execute(table)
        with db:
            db.executemany(UPSERT, [(ACCOUNT, d, START) for d in ids])
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.isolation_level = "DEFERRED"  # as the store's writer: `with db` is one transaction
        for n in range(args.rounds):
            rows = [(ACCOUNT, d, START + 30.0 * (n + 1) + rng.random()) for d in ids]
            rng.shuffle(rows)
            started = time.process_time()
            if whole:
                rows.sort(key=_DEVICE)
            for s in range(0, len(rows), args.batch):
                with db:
                    write(db, rows[s : s + args.batch])
            spent.append(time.process_time() - started)
        assert db.execute("SELECT min(contact_at) FROM device_contacts").fetchone()[0] > START + 30.0 * args.rounds
        db.close()
    return round(statistics.median(spent) * 1e3, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=5_000, help="devices a put_contacts call (WRITE_BATCH)")
    parser.add_argument("--rounds", type=int, default=3, help="writes of the whole fleet a child process")
    parser.add_argument("--runs", type=int, default=4, help="child processes per tree, alternately")
    parser.add_argument("--baseline", help="another checkout's python/ directory, run alternately with this one's")
    parser.add_argument("--options", action="store_true", help="time the choices on plain SQLite instead")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.batch, args.rounds, args.runs = 5_000, 500, 1, 1
    if args.child:
        print(json.dumps(asyncio.run(_child(args))))
        return
    machine = {"machine": platform.machine(), "sqlite": sqlite3.sqlite_version, "load": os.getloadavg()}
    if args.options:
        options = {name: [] for name in OPTIONS}  # ms a whole fleet, each option in turn, `--runs` times
        for _ in range(args.runs):
            for name in options:
                options[name].append(_option(name, args))
        medians = {name: statistics.median(spent) for name, spent in options.items()}
        if not args.smoke:
            out = {"args": vars(args), "ms_per_fleet": options, "medians": medians, **machine}
            (RESULTS / "contacts_write_options.json").write_text(json.dumps(out, indent=2) + "\n")
        base = medians["rowid, arrival order (main)"]
        cells = "; ".join(f"{name} {ms:.0f} ms ({ms / base:.2f}x)" for name, ms in medians.items())
        print(f"contacts write options ({args.devices:,} devices, calls of {args.batch:,}, CPU a fleet): {cells}")
        return
    trees = _trees(args)
    if not args.smoke:
        # no machine path in the results: the baseline is "main" or whatever checkout the command named
        out = {"args": vars(args) | {"baseline": "given" if args.baseline else None}, "trees": trees, **machine}
        (RESULTS / "contacts_write.json").write_text(json.dumps(out, indent=2) + "\n")
    cells = []
    for key, label in (("writer_ms", "writer thread"), ("loop_ms", "event loop"), ("wall_ms", "wall")):
        new = f"{trees['new'][key]} ms"
        if "baseline" in trees:
            old = trees["baseline"][key]
            assert isinstance(old, float) and isinstance(trees["new"][key], float)
            new = f"{old} -> {new} ({trees['new'][key] / old:.2f}x)"
        cells.append(f"{label} {new}")
    print(f"contacts write ({args.devices:,} devices, calls of {args.batch:,}, medians a fleet): " + "; ".join(cells))


if __name__ == "__main__":
    main()
