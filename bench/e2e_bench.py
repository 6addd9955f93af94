"""End-to-end throughput: devices → LwM2M server → core → channel queue → application WebSocket.

Starts `devicehub serve` (embedded store, or `--redis` with two nodes: devices on node A, the WebSocket on
node B), a simulator with N devices changing their temperature at `--rate` per second each, sets a
presubscription on /3303/0/5700 and counts the notifications that arrive on one WebSocket over a window.
Reports events/s delivered (median of `--runs` windows) and the offered rate as the baseline ratio.
Prints one summary line and writes bench/results/e2e.json. `--smoke` runs a few seconds.
Reproduce: `python bench/e2e_bench.py --devices 200 --rate 5 --seconds 10 --runs 3`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.service import ServiceProcess  # noqa: E402


async def _measure(base_url: str, key: str, coap_uri: str, args: argparse.Namespace) -> list[float]:
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(base_url, headers=headers) as http:
        async with http.put("/v2/subscriptions", json=[{"resource-path": ["/3303/0/5700"]}]) as r:
            assert r.status == 202, r.status
        async with http.put("/v2/notification/websocket") as r:
            assert r.status in (200, 201), r.status
        ws = await http.ws_connect("/v2/notification/websocket-connect")
        sim = subprocess.Popen(  # noqa: ASYNC220 - starting a process does not wait for it
            [
                sys.executable,
                "-m",
                "devicehub",
                "simulate",
                "--server",
                coap_uri,
                "--count",
                str(args.devices),
                "--prefix",
                "bench-",
                "--rate",
                str(args.rate),
                "--flavor",
                "oma",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            rates: list[float] = []
            registered = 0
            warm_until = time.monotonic() + args.warmup
            window_start = 0.0
            count = 0
            while len(rates) < args.runs:
                frame = await asyncio.wait_for(ws.receive(), 30)
                message = json.loads(frame.data)
                registered += len(message.get("registrations", []))
                now = time.monotonic()
                if now < warm_until:
                    continue
                if window_start == 0.0:
                    window_start, count = now, 0
                count += len(message.get("notifications", []))
                if now - window_start >= args.seconds:
                    rates.append(count / (now - window_start))
                    window_start, count = now, 0
            await ws.close()
            return rates
        finally:
            sim.terminate()
            sim.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--rate", type=float, default=5.0, help="value changes per second per device")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.rate, args.seconds, args.warmup, args.runs = 5, 5.0, 1.0, 1.0, 1
    with tempfile.TemporaryDirectory() as tmp:
        service = ServiceProcess(data_dir=Path(tmp) / "data").start()
        try:
            rates = asyncio.run(_measure(service.base_url, service.api_key, service.coap_uri, args))
        finally:
            service.stop()
    offered = args.devices * args.rate
    median = statistics.median(rates)
    out = ROOT / "bench" / "results" / "e2e.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "mode": "embedded",
                "devices": args.devices,
                "rate_per_device": args.rate,
                "offered_per_s": offered,
                "delivered_per_s": rates,
                "median": median,
                "smoke": args.smoke,
            },
            indent=2,
        )
    )
    print(
        f"e2e: {median:.0f} notifications/s delivered to one WebSocket (median of {len(rates)}), "
        f"offered {offered:.0f}/s, ratio {median / offered:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
