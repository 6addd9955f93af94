"""CPU and wall time of one directory page on Redis: `RedisStore.list_devices_and_contacts(limit=1001)` (what
`GET /v3/devices?limit=1000` reads, issue 30 #5) over `--devices` devices of twelve resources each (a Pelion
device's record is ~700 bytes with them), a third of them with a stored last contact, on a real redis-server
started here on a free loopback port.

Per call: this process's CPU (utime + stime), redis-server's CPU (`INFO cpu`, used_cpu_user + used_cpu_sys, read
before and after the `--calls` calls) and wall time; medians of `--runs` rounds. The store is whichever `devicehub`
is first on PYTHONPATH, so two checkouts compare by running this twice with each's PYTHONPATH, alternately.
Prints one summary line and writes bench/results/redis_page.json.
Reproduce: `python bench/micro/redis_page_bench.py --calls 100 --runs 3`. `--smoke`: a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import redis.asyncio as aioredis

from devicehub.domain.model import Device, ResourceLink
from devicehub.store.redis.store import RedisStore

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from support.redis_server import redis_server  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "redis_page.json"
ACCOUNT = "a" * 32

_PATHS = ("/1/0/1", "/3/0/0", "/3/0/1", "/3/0/2", "/3/0/3", "/3/0/13", "/3/0/17", "/3/0/18", "/3/0/19", "/3303/0/5700")
_LINKS = (
    ResourceLink(path="/1/0"),
    ResourceLink(path="/3/0"),
    *(
        ResourceLink(path=p, obs=p.startswith("/3303"), rt="ucum:Cel" if p.startswith("/3303") else None)
        for p in _PATHS
    ),
)


def _device(n: int) -> Device:
    return Device(
        id=f"{n:032x}",
        account_id=ACCOUNT,
        endpoint_name=f"bench-device-{n:06d}",
        endpoint_type="sensor",
        lifetime=3600,
        resources=_LINKS,
        created_at=1.7e9 + n,
        updated_at=1.7e9 + n,
        last_seen_at=1.7e9 + n,
    )


async def _server_cpu(client: aioredis.Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def _measure(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    store = RedisStore(url, prefix="page-bench:")
    client = aioredis.Redis.from_url(url)
    await store.open()
    runs: dict[str, list[float]] = {"client_cpu_ms": [], "server_cpu_ms": [], "wall_ms": []}
    try:
        devices = [_device(n) for n in range(args.devices)]
        for start in range(0, len(devices), 500):
            await store.put_registered_devices(devices[start : start + 500])
        await store.put_contacts([(ACCOUNT, d.id, d.last_seen_at + 5) for d in devices[::3]])
        listed, _ = await store.list_devices_and_contacts(ACCOUNT, limit=1001)  # warm: connection, decoded records
        assert len(listed) == min(1001, args.devices)
        for _ in range(args.runs):
            server = await _server_cpu(client)
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(args.calls):
                await store.list_devices_and_contacts(ACCOUNT, limit=1001)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            server = await _server_cpu(client) - server
            runs["client_cpu_ms"].append(1e3 * cpu / args.calls)
            runs["server_cpu_ms"].append(1e3 * server / args.calls)
            runs["wall_ms"].append(1e3 * wall / args.calls)
    finally:
        await store.close()
        await client.aclose()
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=3000)
    parser.add_argument("--calls", type=int, default=200, help="pages per round")
    parser.add_argument("--runs", type=int, default=5, help="rounds (the figures are their medians)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.calls, args.runs = 1200, 10, 1
    with redis_server() as url:
        runs = asyncio.run(_measure(url, args))
    figures: dict[str, object] = {name: statistics.median(values) for name, values in runs.items()}
    figures.update(runs=runs, devices=args.devices, calls=args.calls, machine=platform.node())
    if not args.smoke:
        RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(
        f"redis_page: a page of 1 001 devices costs {figures['client_cpu_ms']:.2f} ms of the client's CPU and "
        f"{figures['server_cpu_ms']:.2f} ms of redis-server's, {figures['wall_ms']:.2f} ms wall (median of "
        f"{args.runs} x {args.calls} calls, {args.devices} devices)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
