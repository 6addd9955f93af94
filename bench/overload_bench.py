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
`--ramp` (issue 30 #3): device → WebSocket latency during and after a ramp of registering devices that notify from
their first second (see `ramp_level`); `--gc-trace` adds the node's full collector passes to it (bench/gc_trace).
Prints one summary line and writes bench/results/overload.json.
Reproduce: `python bench/overload_bench.py --devices 12000 --capacity 700 --runs 3`. `--smoke`: seconds.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import websocket

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
OBSERVED = "/3/0/9"  # the Pelion flavour's auto-observed resource: the hot path notifies it
GC_TRACE = Path(__file__).resolve().parent / "gc_trace"  # `--gc-trace`: its sitecustomize goes first on the path


def start_node(
    stack: contextlib.ExitStack, tmp: str, backlog: int, pythonpath: str | None, gc_trace: Path | None = None
) -> ServiceProcess:
    """A fresh node (`pythonpath`: that checkout's, for an old-against-new comparison; `gc_trace`: a file the node
    appends its collector's full passes to, see bench/gc_trace)."""
    env = {} if pythonpath is None else {"PYTHONPATH": pythonpath}
    if gc_trace is not None:
        path = pythonpath if pythonpath is not None else os.environ.get("PYTHONPATH", "")
        env = {
            "PYTHONPATH": os.pathsep.join(filter(None, (str(GC_TRACE), path))),
            "DEVICEHUB_BENCH_GC_TRACE": str(gc_trace),
        }
    node = ServiceProcess(
        data_dir=Path(tmp) / "data",
        extra_args=("--log-level", "warning", "--registration-backlog", str(backlog)),
        env=env,
    ).start()
    stack.callback(node.stop)
    return node


def start_simulator(
    node: ServiceProcess, devices: int, workers: int, register_rate: float, notify_rate: float, *extra: str
) -> subprocess.Popen[str]:
    """`devicehub simulate` of this checkout (the same load generator whichever node it offers load to)."""
    return subprocess.Popen(
        node.simulate_command(
            devices,
            "--workers", str(workers),
            "--bind", "127.0.0.0/24",
            "--prefix", "load-",
            "--flavor", "pelion",
            "--non",
            "--hot-path",
            "--rate", str(notify_rate),
            "--register-rate", str(register_rate / workers),
            *extra,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def wait_registered(node: ServiceProcess, devices: int, timeout: float) -> tuple[float, float]:
    """(seconds until the node counted `devices` registered, or the timeout; how many it counted)."""
    start = time.perf_counter()
    registered = 0.0
    while time.perf_counter() - start < timeout:
        registered = metrics(node.base_url).get(REGISTERED, 0)
        if registered >= devices:
            break
        time.sleep(0.1)
    return time.perf_counter() - start, registered


def wait_ramp(node: ServiceProcess, devices: int, timeout: float, settle: float = 5.0) -> tuple[float, float, float]:
    """`--ramp`'s end: all `devices` registered, or at least 99 % and no more for `settle` s (on a busy machine a
    few devices give up, their CoAP retransmissions timed out, and do not come back within a run; waiting for them
    measured the timeout, not the ramp). (seconds from the start to the last device counted, how many, the
    wall-clock time of that last count.)"""
    start = time.perf_counter()
    registered, last, changed, changed_at = 0.0, -1.0, start, time.time()
    while True:
        now = time.perf_counter()
        registered = metrics(node.base_url).get(REGISTERED, 0)
        if registered != last:
            last, changed, changed_at = registered, now, time.time()
        if registered >= devices or now - start >= timeout:
            break
        if registered >= 0.99 * devices and now - changed >= settle:
            break
        time.sleep(0.1)
    return changed - start, registered, changed_at


def one_level(
    devices: int, offered: float, workers: int, timeout: float, backlog: int, pythonpath: str | None
) -> dict[str, Any]:
    """A fresh node offered `devices` new devices at `offered` per second in total: how fast all got in."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        node = start_node(stack, tmp, backlog, pythonpath)
        assert node.process is not None
        cpu_before = process_stats(node.process.pid)[1]
        sim = start_simulator(node, devices, workers, offered, NOTIFY_RATE)
        timeline = Timeline([node.base_url], [node.process.pid])
        try:
            took, registered = wait_registered(node, devices, timeout)
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


def cost_level(args: argparse.Namespace, workers: int, shed: bool, pythonpath: str | None) -> dict[str, float]:
    """issue 30 #4: node CPU per Register, every one admitted (the default backlog) or every one shed (a backlog of
    0: the node is always full), `--devices` offered at `--capacity` a second without notifications; the node's CPU
    is read from /proc over `--window` seconds from the node's 100th Register on, less its idle CPU before."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        node = start_node(stack, tmp, 0 if shed else args.backlog, pythonpath)
        assert node.process is not None
        pid = node.process.pid
        idle_from = process_stats(pid)[1]
        time.sleep(1.0)
        idle = process_stats(pid)[1] - idle_from
        sim = start_simulator(node, args.devices, workers, args.capacity, 0.0)
        name = SHED if shed else REGISTRATIONS
        try:
            deadline = time.perf_counter() + args.timeout
            while metrics(node.base_url).get(name, 0) < 100 and time.perf_counter() < deadline:
                time.sleep(0.05)  # polled, with the deadline above: the measurement starts at the 100th Register
            before, counted = process_stats(pid)[1], metrics(node.base_url)
            time.sleep(args.window)
            cpu = process_stats(pid)[1] - before - idle * args.window
            values = metrics(node.base_url)
        finally:
            stop(sim, signal.SIGKILL)
        registers = values.get(name, 0) - counted.get(name, 0)
        return {
            "registers": registers,
            "node_cpu_s": round(cpu, 3),
            "cpu_us_each": round(1e6 * cpu / max(1, registers), 1),
        }


def shed_cost(args: argparse.Namespace, workers: int) -> None:
    variants = {"new": None} if not args.baseline_pythonpath else {"new": None, "old": args.baseline_pythonpath}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {n: {"admitted": [], "shed": []} for n in variants}
    for round_ in range(args.runs):
        for name, path in variants.items():
            for kind in ("admitted", "shed"):
                level = cost_level(args, workers, kind == "shed", path)
                runs[name][kind].append(level)
                print(f"cost round {round_ + 1} {name} {kind}: {json.dumps(level)}", file=sys.stderr)
    summary = {
        name: {kind: statistics.median(r["cpu_us_each"] for r in runs[name][kind]) for kind in ("admitted", "shed")}
        for name in variants
    }
    result = {
        "bench": "overload --shed-cost",
        "devices": args.devices,
        "offered_per_s": args.capacity,
        **{name: {"median_cpu_us": summary[name], "levels": runs[name]} for name in variants},
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / ("overload-cost-smoke.json" if args.smoke else "overload-cost.json")).write_text(
        json.dumps(result, indent=2)
    )
    print(
        "overload --shed-cost: node CPU per Register "
        + "; ".join(
            f"{name} admitted {m['admitted']:.0f} µs, shed {m['shed']:.0f} µs ({m['shed'] / m['admitted']:.2f})"
            for name, m in summary.items()
        )
        + f" (medians of {args.runs})"
    )


class Latencies:
    """The application end of `--ramp`: the dev key's WebSocket channel, presubscribed to the observed resource
    before the devices register; each event's device → application latency with the time it arrived."""

    def __init__(self, node: ServiceProcess) -> None:
        status, _ = node.api("PUT", "/v2/subscriptions", [{"resource-path": [OBSERVED]}])
        assert status in (200, 202, 204), status
        status, _ = node.api("PUT", "/v2/notification/websocket", {})
        assert status in (200, 201), status
        url = "ws" + node.base_url.removeprefix("http") + "/v2/notification/websocket-connect"
        self._ws = websocket.create_connection(url, header=[f"Authorization: Bearer {node.api_key}"])
        self.events: list[tuple[float, float]] = []  # (arrived, latency in s)
        self._thread = threading.Thread(target=self._read, name="events", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(websocket.WebSocketException, OSError, ValueError):  # closed at the end
            while True:
                frame = self._ws.recv()
                now = time.time()
                for note in json.loads(frame).get("notifications", []):
                    sent = float(base64.b64decode(note["payload"]))
                    if sent > 1e9:  # a send time (the hot path's), not a plain value
                        self.events.append((now, now - sent))

    def window(self, start: float, end: float) -> dict[str, float]:
        """Events/s and latency percentiles (ms) of the events that arrived in [start, end)."""
        latencies = sorted(latency for arrived, latency in self.events if start <= arrived < end)
        if len(latencies) < 2:
            return {"events_per_s": 0.0, "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
        cuts = statistics.quantiles(latencies, n=100)
        return {
            "events_per_s": round(len(latencies) / (end - start), 1),
            "p50_ms": round(cuts[49] * 1000, 1),
            "p99_ms": round(cuts[98] * 1000, 1),
            "max_ms": round(latencies[-1] * 1000, 1),
        }

    def close(self) -> None:
        self._ws.close()
        self._thread.join(timeout=5)


def ramp_level(args: argparse.Namespace, workers: int, pythonpath: str | None) -> dict[str, Any]:
    """issue 30 #3: `--devices` register at `--capacity` a second and notify `--notify-rate` times a second each from
    their first second; device → WebSocket latency per second, and its p99 in the window `--after` seconds after
    the ramp (the node counted all registered, see `wait_ramp`) for `--window` seconds."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        trace = Path(tmp) / "gc-trace.txt" if args.gc_trace else None
        node = start_node(stack, tmp, args.backlog, pythonpath, trace)
        latencies = Latencies(node)
        stack.callback(latencies.close)
        started = time.time()
        sim = start_simulator(node, args.devices, workers, args.capacity, args.notify_rate, "--stamp")
        try:
            took, registered, ramp_end = wait_ramp(node, args.devices, args.timeout)
            time.sleep(max(0.0, ramp_end + args.after + args.window - time.time()))
        finally:
            stop(sim, signal.SIGKILL)
        seconds = [latencies.window(t, t + 1) for t in range(int(started), int(ramp_end + args.after + args.window))]
        passes = full_passes(trace)
        if trace is not None:
            for t, second in zip(range(int(started), int(ramp_end + args.after + args.window)), seconds, strict=True):
                second["gc_ms"] = round(sum(wall for start, wall, _, _ in passes if t <= start < t + 1) * 1000, 1)
        after = (ramp_end + args.after, ramp_end + args.after + args.window)
        return {
            "started": started,  # wall clock: a second's index in `per_second` is from int(started)
            "ramp_s": round(took, 2),
            "registered": int(registered),
            "after_ramp": latencies.window(*after),
            "during_ramp": latencies.window(started, ramp_end),
            "worst_second_p99_ms": max((s["p99_ms"] for s in seconds if s["events_per_s"]), default=float("nan")),
            "per_second": seconds,
            "load_average": os.getloadavg()[0],
            **(
                {"gc_during_ramp": gc_summary(passes, started, ramp_end), "gc_after_ramp": gc_summary(passes, *after)}
                if trace is not None
                else {}
            ),
        }


def full_passes(trace: Path | None) -> list[tuple[float, float, float, int]]:
    """The node's full collector passes from its `--gc-trace` file: (wall-clock start, seconds, CPU seconds,
    objects collected) each."""
    if trace is None or not trace.exists():
        return []
    passes = []
    for line in trace.read_text().splitlines():
        start, wall, cpu, collected = line.split()
        passes.append((float(start), float(wall), float(cpu), int(collected)))
    return passes


def gc_summary(passes: list[tuple[float, float, float, int]], start: float, end: float) -> dict[str, float]:
    """The full passes that began in [start, end): how many, their pause in all and the longest (wall clock, ms),
    the longest's CPU (the thread's: what the pass cost without the machine's other jobs) and what they collected."""
    inside = [p for p in passes if start <= p[0] < end]
    return {
        "passes": len(inside),
        "pause_ms": round(sum(p[1] for p in inside) * 1000, 1),
        "longest_ms": round(max((p[1] for p in inside), default=0.0) * 1000, 1),
        "longest_cpu_ms": round(max((p[2] for p in inside), default=0.0) * 1000, 1),
        "collected": sum(p[3] for p in inside),
    }


def ramp(args: argparse.Namespace, workers: int) -> None:
    variants = {"new": None} if not args.baseline_pythonpath else {"new": None, "old": args.baseline_pythonpath}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for round_ in range(args.runs):
        for name, path in variants.items():
            level = ramp_level(args, workers, path)
            runs[name].append(level)
            brief = {k: v for k, v in level.items() if k != "per_second"}
            print(f"ramp round {round_ + 1} {name}: {json.dumps(brief)}", file=sys.stderr)

    def medians(levels: list[dict[str, Any]]) -> dict[str, float]:
        gc_medians = (
            {
                "gc_passes_after": statistics.median(r["gc_after_ramp"]["passes"] for r in levels),
                "gc_longest_after_ms": statistics.median(r["gc_after_ramp"]["longest_ms"] for r in levels),
            }
            if args.gc_trace
            else {}
        )
        return {
            **gc_medians,
            "p50_ms": statistics.median(r["after_ramp"]["p50_ms"] for r in levels),
            "p99_ms": statistics.median(r["after_ramp"]["p99_ms"] for r in levels),
            "worst_second_p99_ms": statistics.median(r["worst_second_p99_ms"] for r in levels),
            "ramp_s": statistics.median(r["ramp_s"] for r in levels),
        }

    result = {
        "bench": "overload --ramp",
        "devices": args.devices,
        "register_rate": args.capacity,
        "notify_rate": args.notify_rate,
        "after_s": args.after,
        "window_s": args.window,
        "runs": args.runs,
        **{name: {"median": medians(runs[name]), "levels": runs[name]} for name in variants},
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / ("overload-ramp-smoke.json" if args.smoke else "overload-ramp.json")).write_text(
        json.dumps(result, indent=2)
    )
    line = f"overload --ramp: {args.devices} devices at {args.capacity:.0f}/s, {args.notify_rate:g} events/s each: "
    line += "; ".join(
        f"{name} p50 {m['p50_ms']:.0f} ms p99 {m['p99_ms']:.0f} ms {args.after:g} s after the ramp "
        f"(worst second's p99 {m['worst_second_p99_ms']:.0f} ms, ramp {m['ramp_s']:.1f} s"
        + (
            f"; {m['gc_passes_after']:g} full gc passes in the window, longest {m['gc_longest_after_ms']:.0f} ms)"
            if args.gc_trace
            else ")"
        )
        for name, m in ((name, result[name]["median"]) for name in variants)  # type: ignore[index]
    )
    print(line + f" (medians of {args.runs})")


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
    parser.add_argument("--ramp", action="store_true", help="issue 30 #3: latency after a ramp (see ramp_level)")
    parser.add_argument(
        "--shed-cost", action="store_true", help="node CPU per admitted and per shed Register (see cost_level)"
    )
    parser.add_argument("--notify-rate", type=float, default=1.0, help="--ramp: events/s per device")
    parser.add_argument("--after", type=float, default=5.0, help="--ramp: the latency window starts this long after")
    parser.add_argument("--window", type=float, default=5.0, help="--ramp: the latency window's length")
    parser.add_argument(
        "--gc-trace", action="store_true", help="--ramp: time the node's full collector passes (bench/gc_trace)"
    )
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 300 devices, one round")
    args = parser.parse_args()
    if args.smoke and args.shed_cost:
        args.devices, args.capacity, args.runs, args.workers, args.window = 300, 150.0, 1, 1, 2.0
    elif args.smoke and args.ramp:
        args.devices, args.capacity, args.runs, args.workers, args.after, args.window = 300, 150.0, 1, 1, 1.0, 2.0
    elif args.smoke:
        # a backlog of 50 so that the smoke run sheds too
        args.devices, args.capacity, args.runs, args.workers, args.timeout, args.backlog = 300, 150.0, 1, 1, 60.0, 50
    factors = [float(f) for f in args.factors.split(",")]
    workers = max(args.workers, -(-args.devices // DEVICES_PER_WORKER))
    if args.ramp:
        ramp(args, workers)
        return
    if args.shed_cost:
        shed_cost(args, workers)
        return
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
