"""CPU cost, in the node, of a Redis-mode registration batch's writes: one script call carrying them all
(`devicehub.store.redis.writes.Writes`, lua/apply_writes.lua, issue 16) against one redis-py command per write in
the same MULTI (as before), same run, same real redis-server (started here on a free loopback port).

A batch is `--devices` devices × `--writes` ZADDs (a first registration queues about a dozen writes: its record,
name, indexes, seen-time, snapshot paths). The figure is this process's CPU (utime + stime: redis-server's work is
not counted) per write, median of `--runs`. Prints one summary line and writes bench/results/redis_writes.json.
Reproduce: `python bench/micro/redis_writes_bench.py --devices 16 --writes 12 --batches 500 --runs 3`.
`--smoke`: a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis

from devicehub.store.redis.writes import Writes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from support.redis_server import redis_server  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "redis_writes.json"


async def _cpu_per_write(batch: Callable[[], Awaitable[None]], batches: int, writes: int) -> float:
    started = time.process_time()
    for _ in range(batches):
        await batch()
    return (time.process_time() - started) / (batches * writes)


async def _measure(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    client = aioredis.Redis.from_url(url)
    members = [f"device-{d:04}" for d in range(args.devices)]
    indexes = [f"bench:index:{w}" for w in range(args.writes)]

    async def commands() -> None:
        async with client.pipeline(transaction=True) as tx:
            for member in members:
                for index in indexes:
                    tx.zadd(index, {member: 0})
            await tx.execute()

    async def script() -> None:
        writes = Writes()
        for member in members:
            for index in indexes:
                writes.zadd(index, member)
        async with client.pipeline(transaction=True) as tx:
            writes.queue_on(tx)
            await tx.execute()

    runs: dict[str, list[float]] = {"commands": [], "script": []}
    try:
        for _ in range(args.runs):  # alternately, so a drift of the machine's speed hits both
            for name, batch in (("commands", commands), ("script", script)):
                runs[name].append(await _cpu_per_write(batch, args.batches, args.devices * args.writes))
    finally:
        await client.aclose()
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=16, help="devices in a batch")
    parser.add_argument("--writes", type=int, default=12, help="writes per device")
    parser.add_argument("--batches", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.batches, args.runs = 20, 1
    with redis_server() as url:
        runs = asyncio.run(_measure(url, args))
    commands, script = statistics.median(runs["commands"]), statistics.median(runs["script"])
    figures = {
        "command_per_write_us": 1e6 * commands,
        "script_per_write_us": 1e6 * script,
        "ratio": commands / script,
        "runs_us": {name: [1e6 * v for v in values] for name, values in runs.items()},
        "devices": args.devices,
        "writes": args.writes,
        "batches": args.batches,
        "machine": platform.node(),
    }
    if not args.smoke:
        RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(
        f"redis_writes: {figures['script_per_write_us']:.2f} µs of client CPU per write as one script call vs "
        f"{figures['command_per_write_us']:.2f} µs as one command each in the MULTI ({figures['ratio']:.1f}x; "
        f"{args.devices} devices x {args.writes} writes a batch, median of {args.runs})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
