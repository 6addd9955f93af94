"""Registration goodput under overload (issue 30 #4): new devices offered at 1×, 4× and 16× of the node's capacity.

Each level runs a fresh `devicehub serve` (embedded store, `--log-level warning`) and
`devicehub simulate --count N --flavor pelion --non --hot-path --rate 0.1 --bind 127.0.0.0/24` whose devices start at
`factor × --capacity` per second in total and notify from their first second; a shed Register (5.03) is retried
after its Max-Age. Goodput = N / (time until the node counts all N registered). The node must hold its peak
however hard it is pushed: goodput at 4× and 16× against goodput at 1× of the same run (target ≥ 0.9).
Also reported per level: Registers shed, the node's CPU per Register received (admitted or shed), the machine's
load. The levels run in rounds (1×, 4×, 16×, then again) so that drift in the shared machine's load spreads over
them; figures are medians over the rounds.

This machine has 2 cores shared by the node, the simulators and other jobs: the fleet is scaled down (default
12 000 devices; the issue's figures are 100 000) and `--capacity` is this machine's (the node's goodput when
offered about what it takes).
Prints one summary line and writes bench/results/overload.json.
Reproduce: `python bench/overload_bench.py --devices 12000 --capacity 700 --runs 3`. `--smoke`: seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_bench import (
    REGISTERED,
    REGISTRATIONS,
    SHED,
    ServiceProcess,
    Timeline,
    metrics,
    process_stats,
    stop,
)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEVICES_PER_WORKER = 12_500  # sockets per simulator process: well below the 20 000 file descriptors
# value changes a second per device, each a NON notification from the device's first second registered: the
# registrations compete with the events of the devices already in (10 000 devices: 1 000 events/s at the end)
NOTIFY_RATE = 0.1


def one_level(
    devices: int, offered: float, workers: int, timeout: float, backlog: int, pythonpath: str | None
) -> dict[str, Any]:
    """A fresh node offered `devices` new devices at `offered` per second in total: how fast all got in
    (`pythonpath`: the node and simulator of that checkout, for an old-against-new comparison)."""
    env = {} if pythonpath is None else {"PYTHONPATH": pythonpath}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        node = ServiceProcess(
            data_dir=Path(tmp) / "data",
            extra_args=("--log-level", "warning", "--registration-backlog", str(backlog)),
            env=env,
        ).start()
        stack.callback(node.stop)
        assert node.process is not None
        cpu_before = process_stats(node.process.pid)[1]
        sim = subprocess.Popen(
            node.simulate_command(
                devices,
                "--workers", str(workers),
                "--bind", "127.0.0.0/24",
                "--prefix", "load-",
                "--flavor", "pelion",
                "--non",
                "--hot-path",
                "--rate", str(NOTIFY_RATE),
                "--register-rate", str(offered / workers),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env={**os.environ, **env},
        )  # fmt: skip
        timeline = Timeline([node.base_url], [node.process.pid])
        start = time.perf_counter()
        registered = 0.0
        try:
            while time.perf_counter() - start < timeout:
                registered = metrics(node.base_url).get(REGISTERED, 0)
                if registered >= devices:
                    break
                time.sleep(0.1)
            took = time.perf_counter() - start
            values = metrics(node.base_url)
            cpu = process_stats(node.process.pid)[1] - cpu_before
        finally:
            stop(sim, signal.SIGKILL)  # no de-registration of every device at the end
            samples = timeline.stop()
        admitted, shed = values.get(REGISTRATIONS, 0), values.get(SHED, 0)
        return {
            "offered_per_s": offered,
            "registered": int(registered),
            "seconds": round(took, 2),
            "goodput_per_s": round(registered / took, 1),
            "admitted": int(admitted),
            "shed": int(shed),
            "node_cpu_s": round(cpu, 2),
            "node_cpu_ms_per_register": round(1000 * cpu / max(1.0, admitted + shed), 3),
            "load_average": os.getloadavg()[0],
            "timeline": samples,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=12_000)
    parser.add_argument("--capacity", type=float, default=700.0, help="registrations/s this node takes (1×)")
    parser.add_argument("--factors", default="1,4,16", help="offered rates as multiples of --capacity")
    parser.add_argument("--runs", type=int, default=3, help="rounds over the factors")
    parser.add_argument("--workers", type=int, default=2, help="simulator processes")
    parser.add_argument("--backlog", type=int, default=2000, help="the node's --registration-backlog")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up on a level after this many seconds")
    parser.add_argument(
        "--baseline-pythonpath",
        help="also run each level with this PYTHONPATH (another checkout's python/), alternating: old against new",
    )
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 300 devices, one round")
    args = parser.parse_args()
    if args.smoke:
        # a backlog of 50 so that the smoke run sheds too
        args.devices, args.capacity, args.runs, args.workers, args.timeout, args.backlog = 300, 150.0, 1, 1, 60.0, 50
    factors = [float(f) for f in args.factors.split(",")]
    workers = max(args.workers, -(-args.devices // DEVICES_PER_WORKER))
    variants = {"new": None} if not args.baseline_pythonpath else {"new": None, "old": args.baseline_pythonpath}
    results: dict[str, dict[str, Any]] = {}
    levels: dict[str, dict[float, list[dict[str, Any]]]] = {name: {f: [] for f in factors} for name in variants}
    for round_ in range(args.runs):
        for factor in factors:
            for name, path in variants.items():
                level = one_level(args.devices, factor * args.capacity, workers, args.timeout, args.backlog, path)
                levels[name][factor].append(level)
                brief = {k: v for k, v in level.items() if k not in ("timeline", "simulator")}
                print(f"round {round_ + 1} {name} {factor:g}×: {json.dumps(brief)}", file=sys.stderr)
    for name in variants:
        results[name] = summary(levels[name], factors)
    result = {
        "bench": "overload",
        "devices": args.devices,
        "capacity_per_s": args.capacity,
        "runs": args.runs,
        "simulator_workers": workers,
        **results["new"],
        **({"baseline": results["old"]} if "old" in results else {}),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / ("overload-smoke.json" if args.smoke else "overload.json")).write_text(json.dumps(result, indent=2))
    line = f"overload: {args.devices} devices, capacity {args.capacity:.0f}/s: goodput " + shown(results["new"])
    if "old" in results:
        line += "; baseline " + shown(results["old"])
    print(line + f" (medians of {args.runs})")


def summary(levels: dict[float, list[dict[str, Any]]], factors: list[float]) -> dict[str, Any]:
    """Median goodput per factor and its ratio to the first factor's, taken within each round (same-run pairs)."""
    goodput = {f: statistics.median(r["goodput_per_s"] for r in levels[f]) for f in factors}
    base_runs = levels[factors[0]]
    paired = {
        f: round(
            statistics.median(
                r["goodput_per_s"] / b["goodput_per_s"] for r, b in zip(levels[f], base_runs, strict=True)
            ),
            3,
        )
        for f in factors
    }
    return {
        "goodput_per_s": {f"{f:g}x": goodput[f] for f in factors},
        "goodput_ratio": {f"{f:g}x": paired[f] for f in factors},
        "shed": {f"{f:g}x": statistics.median(r["shed"] for r in levels[f]) for f in factors},
        "levels": {f"{f:g}x": levels[f] for f in factors},
    }


def shown(result: dict[str, Any]) -> str:
    goodput, ratio, shed = result["goodput_per_s"], result["goodput_ratio"], result["shed"]
    return ", ".join(f"{f} {goodput[f]:.0f}/s ({ratio[f]:.2f}, {shed[f]:.0f} shed)" for f in goodput)


if __name__ == "__main__":
    main()
