"""The domain's notification path at the fleet's shapes (issue 30 #1): what a value costs `DeviceService.notifications`
and the drain into `SubscriptionRouter.deliver_values` (main) / `deliver_held` (issue 30 #1's held entries) as the
same values come from more devices.

One process per (variant, fleet): a DeviceService on a store, a gateway and a sink that do nothing (a value's
snapshot write, its split and its publish cost a call each and no more), D devices registered through
`registered_many` with one presubscription of the account (`/3/0/9`, one key: each value reaches it, and its route
is cached per device), then values of `/3/0/9` in batches of `--batch` (a loop turn's datagrams), from the devices in
a shuffled order, each device once per pass over the fleet, so a value's device is cold in the caches as a fleet's is.
The figure is the median, over `--rounds` rounds of `--values` values, of the process's CPU (`time.process_time_ns`)
per value, from `notifications` until its batch is drained; the collector is set as the node sets it
(devicehub.collector.settle after start-up). `--baseline-pythonpath DIR` runs DIR's code (main) as `old`, in turns
with this checkout's (`new`), `--runs` times each, in the same run; the ratio 50 000 / 200 is each variant's own.
Prints one summary line and writes bench/results/notification_path.json.
Reproduce: `python bench/micro/notification_path_bench.py --baseline-pythonpath <main>/python` (`--smoke`: seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
PATH = "/3/0/9"


def worker(devices: int, values: int, rounds: int, batch: int) -> dict[str, float]:
    """One fleet in this process (whichever devicehub PYTHONPATH gives): median CPU ns per value."""
    import asyncio
    import random
    import time
    from collections.abc import Sequence
    from typing import Any, cast

    from devicehub import collector
    from devicehub.clock import ManualClock
    from devicehub.domain.model import Device, PresubscriptionRule, Registration, ReportedValue, ResourceLink
    from devicehub.domain.ports import EventSink
    from devicehub.domain.service import DeviceService
    from devicehub.domain.storage.store import Store

    rules = [("k" * 32, [PresubscriptionRule(resource_path=(PATH,))])]

    class Nothing:
        """The store, gateway and sink calls the path makes, each returning at once."""

        async def get_devices(self, device_ids: Sequence[str]) -> list[Device]:
            return []

        async def put_registered_devices(self, *args: object) -> None:
            pass

        async def account_presubscriptions(self, account_id: str) -> list[tuple[str, list[PresubscriptionRule]]]:
            return rules

        async def devices_with_pending_requests(self, device_ids: Sequence[str]) -> set[str]:
            return set()

        async def set_reported_many(self, values: Sequence[tuple[str, str, ReportedValue]]) -> None:
            pass

        async def put_contacts(self, contacts: Sequence[tuple[str, str, float]]) -> None:
            pass

        def unavailable(self, error: BaseException) -> bool:
            return False

        async def publish_many(self, events: Sequence[object]) -> None:
            pass

        async def publish_account(self, account_id: str, event: object) -> None:
            pass

        async def publish(self, key_ids: Sequence[str], event: object) -> None:
            pass

        def observed(self, device_id: str, path: str) -> bool:
            return True  # presubscription targets count as observed already: no observe task per device

        def split_values(self, path: str, cf: int | None, payload: bytes, ct: str, definition: object = None) -> Any:
            return [(path, payload, ct)]

    async def main() -> list[float]:
        nothing = Nothing()
        clock = ManualClock()
        service = DeviceService(cast(Store, nothing), clock, cast(EventSink, nothing))
        await service.start(cast(Any, nothing))
        links = (ResourceLink("/3/0"), ResourceLink(PATH))
        now = clock.now()
        ids = [f"{n:08x}{random.getrandbits(96):024x}" for n in range(devices)]
        for start in range(0, devices, 1000):
            await service.registered_many(
                [
                    Registration(
                        device_id=i,
                        account_id="a" * 32,
                        endpoint_name=f"ep-{i[:8]}",
                        lifetime=86400,
                        links=links,
                        host="127.0.0.1",
                        port=5683,
                        registered_at=now,
                        updated_at=now,
                        expires_at=now + 86400,
                    )
                    for i in ids[start : start + 1000]
                ]
            )
        collector.settle()
        order = ids[:]
        payload = b"21.5"
        cursor = len(order)
        per_value = []
        for round_ in range(rounds + 1):  # the first warms up (every device's route answer is cached in it)
            spent = 0
            done = 0
            while done < values:
                if cursor + batch > len(order):
                    random.shuffle(order)
                    cursor = 0
                chunk = [(i, PATH, 0, payload, None) for i in order[cursor : cursor + batch]]
                cursor += batch
                started = time.process_time_ns()
                service.notifications(chunk)
                await service._drainer  # type: ignore[misc]  # the drain task this batch started
                spent += time.process_time_ns() - started
                done += len(chunk)
            if round_:
                per_value.append(spent / done)
        return per_value

    per_value = asyncio.run(main())
    return {"ns_per_value": statistics.median(per_value), "rounds": len(per_value)}


def run_one(pythonpath: str, devices: int, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    command = [sys.executable, __file__, "--worker", str(devices), "--values", str(args.values)]
    command += ["--rounds", str(args.rounds), "--batch", str(args.batch)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleets", default="200,50000", help="registered devices, comma-separated (first: the base)")
    parser.add_argument("--values", type=int, default=50_000, help="values a round")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds a process (after one warm-up)")
    parser.add_argument("--batch", type=int, default=32, help="values a notifications() call (a loop turn's)")
    parser.add_argument("--runs", type=int, default=3, help="processes per (variant, fleet), in turns")
    parser.add_argument("--baseline-pythonpath", default="", help="the old code's PYTHONPATH (main's python/)")
    parser.add_argument("--smoke", action="store_true", help="seconds: 200 and 2 000 devices, one run")
    parser.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.values, args.rounds, args.batch)))
        return
    if args.smoke:
        args.fleets, args.values, args.rounds, args.runs = "200,2000", 2_000, 2, 1
    fleets = [int(f) for f in args.fleets.split(",")]
    here = str(Path(__file__).resolve().parents[2] / "python")
    variants = {"new": here}
    if args.baseline_pythonpath:
        variants["old"] = args.baseline_pythonpath
    samples: dict[str, dict[int, list[float]]] = {name: {f: [] for f in fleets} for name in variants}
    for run in range(args.runs):
        for fleet in fleets:
            for name in sorted(variants, reverse=run % 2 == 1):  # alternate which goes first
                ns = run_one(variants[name], fleet, args)["ns_per_value"]
                samples[name][fleet].append(ns)
                print(f"run {run + 1} {name} {fleet}: {ns:.0f} ns/value", file=sys.stderr)
    medians = {name: {f: statistics.median(v) for f, v in per.items()} for name, per in samples.items()}
    base, top = fleets[0], fleets[-1]
    summary = {
        name: {"ns_per_value": {str(f): round(m) for f, m in per.items()}, "ratio": per[top] / per[base]}
        for name, per in medians.items()
    }
    result = {
        "bench": "notification_path",
        "python": platform.python_version(),
        "args": {k: v for k, v in vars(args).items() if k not in ("worker", "baseline_pythonpath")},
        "samples": {name: {str(f): v for f, v in per.items()} for name, per in samples.items()},
        "medians": summary,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "notification_path-smoke.json" if args.smoke else "notification_path.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    line = "notification path: " + "; ".join(
        f"{v} {summary[v]['ns_per_value'][str(base)]} ns/value at {base}, {summary[v]['ns_per_value'][str(top)]} at "
        f"{top} ({summary[v]['ratio']:.2f}x)"
        for v in variants
    )
    if "old" in medians:
        line += f"; new/old at {top}: {medians['new'][top] / medians['old'][top]:.2f}x"
    print(line + f" (medians of {args.runs} runs x {args.rounds} rounds)")


if __name__ == "__main__":
    main()
