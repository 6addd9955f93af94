"""Plots of the benchmark runs with a timeline, one PNG beside each JSON: the end-to-end runs (delivered events/s and
latency p50/p99 for each second of the measurement windows, bench/results/e2e-*.json from bench/e2e_bench.py) and
the scale runs (devices registered, registrations and sheds per second through ramp, hold, storm and steady phases,
bench/results/scale*.json from bench/scale_bench.py).

Run: `python bench/plot.py` (after the benchmarks; bench/README.md lists their commands).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

RESULTS = Path(__file__).resolve().parent / "results"


def plot(result: dict[str, object], out: Path) -> None:
    timeline = result["timeline"]
    assert isinstance(timeline, list)
    t = [p["t"] for p in timeline]
    fig, (rate, latency) = plt.subplots(2, 1, sharex=True, figsize=(8, 5.5))
    title = (
        f"{result['channel']}, {result['mode']}, {result['devices']} devices, "
        f"{'CON' if result['confirmable'] else 'NON'}, {result['offered_per_s']:,.0f}/s offered"
    )
    fig.suptitle(title, fontsize=10)
    rate.plot(t, [p["events"] for p in timeline], marker="o", color="#1d3557", label="delivered")
    rate.axhline(float(str(result["offered_per_s"])), color="#e63946", linestyle="--", label="offered")
    rate.set_ylabel("events/s")
    rate.set_ylim(bottom=0)
    rate.legend(loc="lower right")
    latency.plot(t, [p["p50_ms"] for p in timeline], marker="o", label="p50")
    latency.plot(t, [p["p99_ms"] for p in timeline], marker="o", label="p99")
    latency.set_ylabel("device → application latency (ms)")
    latency.set_xlabel("second of the measurement")
    latency.set_ylim(bottom=0)
    latency.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _per_second(timeline: list[dict[str, float]], name: str) -> list[float]:
    """A cumulative count of the timeline as a rate between consecutive samples."""
    return [(b[name] - a[name]) / (b["t"] - a["t"]) for a, b in itertools.pairwise(timeline)]


def plot_scale(result: dict[str, object], out: Path) -> None:
    timeline = result["timeline"]
    assert isinstance(timeline, list)
    t = [p["t"] for p in timeline]
    with_cpu = "node_cpu_s" in timeline[0]  # runs from before the CPU was sampled have two panels
    panels = plt.subplots(3 if with_cpu else 2, 1, sharex=True, figsize=(8, 7.5 if with_cpu else 5.5))[1]
    fig = panels[0].figure
    devices, rates = panels[0], panels[1]
    command = str(result["command"]).replace("python bench/scale_bench.py ", "")
    fig.suptitle(f"scale_bench {command}", fontsize=8)
    devices.plot(t, [p["registered"] for p in timeline], color="#1d3557", label="registered")
    devices.plot(t, [p["backlog"] for p in timeline], color="#e63946", label="backlog (admitted, not stored)")
    devices.set_ylabel("devices")
    devices.set_ylim(bottom=0)
    devices.legend(loc="lower right")
    for name, color in (("registrations", "#457b9d"), ("shed", "#e63946"), ("receive_drops", "#f4a261")):
        if name not in timeline[0]:  # runs from before the drops were counted
            continue
        rates.plot(t[1:], _per_second(timeline, name), color=color, label=f"{name}/s")
    rates.set_ylabel("Registers per second")
    rates.set_ylim(bottom=0)
    rates.legend(loc="upper right")
    if with_cpu:
        cores = panels[2]
        for name, color, label in (
            ("node_cpu_s", "#1d3557", "node(s)"),
            ("machine_cpu_s", "#e63946", "whole machine (node + simulators)"),
        ):
            cores.plot(t[1:], _per_second(timeline, name), color=color, label=label)
        cores.set_ylabel("cores busy")
        cores.set_ylim(bottom=0)
        cores.legend(loc="upper right")
    panels[-1].set_xlabel("seconds since the node started")
    starts = {}  # phase → its first sample's time, in order; each is shaded up to the next one's
    for p in timeline:
        starts.setdefault(p["phase"], p["t"])
    bounds = [*starts.values(), timeline[-1]["t"]]
    for n, phase in enumerate(starts):
        for axis in panels:
            axis.axvspan(bounds[n], bounds[n + 1], color="#a8dadc" if n % 2 else "#f1faee", alpha=0.5, lw=0)
        devices.text(bounds[n], 0, f" {phase}", fontsize=8, va="bottom")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> int:
    made = 0
    for path in sorted([*RESULTS.glob("e2e-*.json"), *RESULTS.glob("scale*.json")]):
        result = json.loads(path.read_text())
        if not result.get("timeline") or result.get("smoke"):
            continue
        out = path.with_suffix(".png")
        (plot_scale if path.name.startswith("scale") else plot)(result, out)
        made += 1
        print(f"plot {out.relative_to(RESULTS.parent.parent)}: {len(result['timeline'])} seconds")
    print(f"bench plots: {made} written to bench/results/")
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())
