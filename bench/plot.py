"""Plots of the end-to-end benchmark runs: delivered events/s and latency p50/p99 for each second of the
measurement windows, one PNG per bench/results/e2e-*.json that has a timeline (bench/e2e_bench.py writes it).

Run: `python bench/plot.py` (after the e2e benchmarks; bench/README.md lists their commands).
"""

from __future__ import annotations

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


def main() -> int:
    made = 0
    for path in sorted(RESULTS.glob("e2e-*.json")):
        result = json.loads(path.read_text())
        if not result.get("timeline") or result.get("smoke"):
            continue
        out = path.with_suffix(".png")
        plot(result, out)
        made += 1
        print(f"plot {out.relative_to(RESULTS.parent.parent)}: {len(result['timeline'])} seconds")
    print(f"bench plots: {made} written to bench/results/")
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())
