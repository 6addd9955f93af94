"""Registration ramp: `devicehub serve` (embedded store) + `devicehub simulate --count N`, time until the service
lists all N devices as registered (issue 8: 1000 within 10 s on this machine).

The simulator starts devices at `--register-rate` per second (each on its own UDP socket); the service side is
read through `GET /v3/devices?filter=state%3Dregistered` (polled every 50 ms: a measurement, not a test).
Baseline, same run: the simulator's own ramp time (N / register-rate), the least any server could take.
Prints one summary line and writes bench/results/register.json.
Reproduce: `python bench/register_bench.py --devices 1000 --runs 3`. `--smoke`: a few seconds.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.service import ServiceProcess  # noqa: E402
from support.waiting import wait_until  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "register.json"


def registered(base_url: str, key: str) -> int:
    request = urllib.request.Request(
        f"{base_url}/v3/devices?filter=state%3Dregistered&limit=2&include=total_count",
        headers={"Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = json.load(response)
    return int(body.get("total_count", len(body.get("data", []))))


def one_run(devices: int, register_rate: float, timeout: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        service = ServiceProcess(data_dir=Path(tmp) / "data").start()
        sim = None
        try:
            start = time.perf_counter()
            sim = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "devicehub",
                    "simulate",
                    "--server",
                    service.coap_uri,
                    "--count",
                    str(devices),
                    "--prefix",
                    "ramp-",
                    "--rate",
                    "0",
                    "--register-rate",
                    str(register_rate),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_until(
                lambda: registered(service.base_url, service.api_key) >= devices,
                within=timeout,
                what=f"all {devices} devices registered",
            )
            return time.perf_counter() - start
        finally:
            if sim is not None:
                sim.terminate()
                sim.wait(timeout=60)
            service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--register-rate", type=float, default=500.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.runs = 20, 1
    seconds = statistics.median(one_run(args.devices, args.register_rate, args.timeout) for _ in range(args.runs))
    ramp = args.devices / args.register_rate
    result = {
        "devices": args.devices,
        "register_rate": args.register_rate,
        "runs": args.runs,
        "seconds_to_all_registered": seconds,
        "simulator_ramp_seconds": ramp,
        "ratio": seconds / ramp,
        "machine": platform.machine(),
        "smoke": args.smoke,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"register: {args.devices} devices registered in {seconds:.2f} s (median of {args.runs}); simulator ramp "
        f"alone {ramp:.2f} s; ratio {seconds / ramp:.2f}"
    )


if __name__ == "__main__":
    main()
