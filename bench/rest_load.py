"""REST and event load benchmark: devicehub (embedded store) + N simulated devices + Locust headless.

Measures requests/s and p50/p99 latency per call of bench/locustfile.py (subscribe, device request, echo) and, next
to them (issue 30 #7), the events of two notification channels held by Locust users — a WebSocket and an HTTP
callback receiver, each on an API key of its own made here — with each event's device → application latency in
Locust's statistics (request type `EVENT`): events/s and p50/p99 per channel. The devices are
`devicehub simulate --hot-path --non --stamp` sending `--event-rate` notifications a second in total; every one goes
to both channels (each key presubscribes to the observed resource). Without `--event-rate`: REST only, as before.
Prints one summary line and writes bench/results/rest_load.json. `--smoke` runs a few seconds, events included.
Reproduce: `python bench/rest_load.py --devices 50 --users 20 --seconds 30 --event-rate 1200`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.service import ServiceProcess  # noqa: E402

# what the hot path notifies: the Pelion flavour's auto-observed resource, and the one the REST users subscribe to
# (the hot path takes a device's newest observation)
OBSERVED = ["/3/0/9", "/3303/0/5700"]


def new_key(service: ServiceProcess, name: str) -> str:
    """An API key of the dev key's account (its own channel: one per key, spec §2.5), presubscribed to the devices'
    observed resource before they register: a Pelion device's auto-observed values reach the presubscriptions that
    were there when it registered."""
    status, body = service.api("POST", "/v3/api-keys", {"name": name})
    assert status == 201, (status, body)
    key = str(body["key"])
    request = urllib.request.Request(
        f"{service.base_url}/v2/subscriptions",
        method="PUT",
        data=json.dumps([{"resource-path": OBSERVED}]).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status in (200, 202, 204), answer.status
    return key


def notifications(service: ServiceProcess) -> float:
    """Notifications the node has taken from its devices so far (its /metrics)."""
    with urllib.request.urlopen(f"{service.base_url}/metrics", timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("devicehub_notifications_total "):
                return float(line.split()[-1])
    return 0.0


def row_figures(row: dict[str, str]) -> dict[str, Any]:
    return {
        "requests_per_s": float(row["Requests/s"]),
        "p50_ms": float(row["50%"]),
        "p99_ms": float(row["99%"]),
        "failures": int(row["Failure Count"]),
        "requests": int(row["Request Count"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=50)
    parser.add_argument("--users", type=int, default=20, help="REST users (the two event users come on top)")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument(
        "--event-rate", type=float, default=0.0, help="notifications/s the devices send in total (0: REST only)"
    )
    parser.add_argument(
        "--rest-wait",
        type=float,
        default=None,
        help="seconds each REST user waits between calls (default: 0 without events, 0.1 with them)",
    )
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.users, args.seconds, args.event_rate = 3, 2, 5, 100.0
    events = args.event_rate > 0
    with tempfile.TemporaryDirectory() as tmp:
        # the per-key limit is switched off on purpose: this measures throughput, not the limiter
        service = ServiceProcess(data_dir=Path(tmp) / "data", extra_args=("--rate-limit", "0")).start()
        rate = args.event_rate / args.devices if events else 0.2
        rest_wait = args.rest_wait if args.rest_wait is not None else (0.1 if events else 0.0)
        env = {**os.environ, "DEVICEHUB_API_KEY": service.api_key, "DEVICEHUB_REST_WAIT": str(rest_wait)}
        if events:
            env["DEVICEHUB_WEBSOCKET_KEY"] = new_key(service, "locust-websocket")
            env["DEVICEHUB_CALLBACK_KEY"] = new_key(service, "locust-callback")
        sim = subprocess.Popen(
            service.simulate_command(
                args.devices,
                "--prefix", "load-",
                "--rate", str(rate),
                *(("--hot-path", "--non", "--stamp") if events else ()),
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            devices = service.registered_devices(args.devices, within=30)
            env["DEVICEHUB_DEVICES"] = ",".join(devices)
            users = args.users + (2 if events else 0)
            prefix = Path(tmp) / "locust"
            taken, started = notifications(service), time.perf_counter()
            subprocess.run(
                [
                    sys.executable, "-m", "locust",
                    "-f", str(ROOT / "bench" / "locustfile.py"),
                    "--headless",
                    "-u", str(users),
                    "-r", str(users),
                    "-t", f"{args.seconds}s",
                    "--host", service.base_url,
                    "--csv", str(prefix),
                    "--only-summary",
                    *(() if events else ("Application",)),
                ],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            ingested = (notifications(service) - taken) / (time.perf_counter() - started)
            with open(f"{prefix}_stats.csv") as stats:
                rows = list(csv.DictReader(stats))
        finally:
            sim.terminate()
            sim.wait(timeout=20)
            service.stop()
    calls = {row["Name"]: row_figures(row) for row in rows if row["Type"] not in ("EVENT", "")}
    channels = {row["Name"]: row_figures(row) for row in rows if row["Type"] == "EVENT"}
    rest = {name: figures for name, figures in calls.items() if name != "Aggregated"}
    out = ROOT / "bench" / "results" / ("rest_load-smoke.json" if args.smoke else "rest_load.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "devices": args.devices,
                "users": args.users,
                "seconds": args.seconds,
                "event_rate": args.event_rate,
                "rest_wait_s": rest_wait,
                "ingested_per_s": round(ingested, 1),
                "smoke": args.smoke,
                "calls": rest,
                "channels": channels,
            },
            indent=2,
        )
    )
    rest_rate = sum(figures["requests_per_s"] for figures in rest.values())
    line = (
        f"rest_load: REST {rest_rate:.0f} req/s, p99 ≤ {max((f['p99_ms'] for f in rest.values()), default=0):.0f} ms, "
        f"{sum(f['failures'] for f in rest.values())} failures ({args.users} users, {len(devices)} devices)"
    )
    if events:
        line += f"; node took {ingested:.0f} events/s"
    for name, figures in sorted(channels.items()):
        line += (
            f"; {name} {figures['requests_per_s']:.0f} events/s, p50 {figures['p50_ms']:.0f} ms, "
            f"p99 {figures['p99_ms']:.0f} ms"
        )
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
