"""REST load benchmark: devicehub (embedded store) + N simulated devices + Locust headless.

Measures requests/s and p50/p99 latency per call of bench/locustfile.py (subscribe, device request, echo).
Prints one summary line and writes bench/results/rest_load.json. `--smoke` runs a few seconds.
Reproduce: `python bench/rest_load.py --devices 50 --users 20 --seconds 30`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.service import ServiceProcess  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=50)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.users, args.seconds = 3, 2, 3
    with tempfile.TemporaryDirectory() as tmp:
        # the per-key limit is switched off on purpose: this measures throughput, not the limiter
        service = ServiceProcess(data_dir=Path(tmp) / "data", extra_args=("--rate-limit", "0")).start()
        sim = subprocess.Popen(
            service.simulate_command(
                args.devices,
                "--prefix",
                "load-",
                "--rate",
                "0.2",
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            devices = service.registered_devices(args.devices, within=30)
            env = {**os.environ, "DEVICEHUB_API_KEY": service.api_key, "DEVICEHUB_DEVICES": ",".join(devices)}
            prefix = Path(tmp) / "locust"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "locust",
                    "-f",
                    str(ROOT / "bench" / "locustfile.py"),
                    "--headless",
                    "-u",
                    str(args.users),
                    "-r",
                    str(args.users),
                    "-t",
                    f"{args.seconds}s",
                    "--host",
                    service.base_url,
                    "--csv",
                    str(prefix),
                    "--only-summary",
                ],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            rows = list(csv.DictReader(open(f"{prefix}_stats.csv")))
        finally:
            sim.terminate()
            sim.wait(timeout=20)
            service.stop()
    results = {
        row["Name"]: {
            "requests_per_s": float(row["Requests/s"]),
            "p50_ms": float(row["50%"]),
            "p99_ms": float(row["99%"]),
            "failures": int(row["Failure Count"]),
            "requests": int(row["Request Count"]),
        }
        for row in rows
    }
    out = ROOT / "bench" / "results" / "rest_load.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "devices": args.devices,
                "users": args.users,
                "seconds": args.seconds,
                "smoke": args.smoke,
                "calls": results,
            },
            indent=2,
        )
    )
    total = results.get("Aggregated", {})
    print(
        f"rest_load: {total.get('requests_per_s', 0):.0f} req/s, p50 {total.get('p50_ms', 0):.0f} ms, "
        f"p99 {total.get('p99_ms', 0):.0f} ms, {total.get('failures', 0)} failures "
        f"({args.users} users, {len(devices)} devices)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
