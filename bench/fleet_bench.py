"""The fleet shape (issue 30 #6): service CPU per event and device → WebSocket latency as the same total rate comes
from more devices, each notifying more rarely.

For each fleet size of `--fleets` (default 200, 10 000 and 50 000 devices) a fresh `devicehub serve` (embedded
store) gets a presubscription on `/3/0/9` and a WebSocket channel read by this process, and
`devicehub simulate --hot-path --non --bind 127.0.0.0/24` registers the fleet and sends `--rate` NON notifications/s
in total (`--rate / devices` per device; each payload is its send time, so this process measures device → WebSocket
latency on the one machine clock). Once every device is registered and `--warmup` seconds have passed, `--runs`
windows of `--seconds` each measure the service's CPU (utime + stime of all its threads, /proc) per event delivered
and the latency percentiles of what the windows received. Simulate runs `--workers` processes (2 as the issue has
it), more when a worker would hold more sockets than the process may open (15 000 each).
Same-run baseline: bench/e2e_bench.py's bare relay (uvloop + aiohttp forwarding each datagram unparsed as a
WebSocket frame) under e2e_bench's generator at 200 devices and the same total rate, NON (`--no-relay` skips it).
The figure the issue's target is about: CPU per event at each fleet size over the smallest fleet's, same run; and
(issue 30 #3) each fleet's latency p99 over the relay's, same run: `--fleets 10000 --rate 30000` puts 10 000 devices
× 3/s next to the relay at 30 000/s.
Writes bench/results/fleet.json (or fleet-<tag>.json) and plots CPU per event against fleet size to the PNG beside
it. `--smoke` runs a few seconds with small fleets and writes nothing.
Reproduce: `python bench/fleet_bench.py --rate 10000 --fleets 200,10000,50000 --seconds 5 --runs 3`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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

import aiohttp
import uvloop
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_bench import Collector, _measure_relay, _p50_p99, cpu_seconds  # noqa: E402
from support.ports import free_tcp_port  # noqa: E402
from support.service import ServiceProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SOCKETS_PER_WORKER = 15_000  # under this machine's open-file limit (20 000) with room for the rest
PATH = "/3/0/9"  # the Pelion flavour's auto-observed battery: the hot path notifies it


async def _stub_application() -> tuple[web.AppRunner, str]:
    """Where simulate's own latency probe (`--app`) goes: the simulator stamps each payload with its send time only
    when it measures latency itself, and this bench wants the stamps but not a second channel on the service (the
    probe's would replace the bench's and take its events). It answers the probe's calls and holds its socket idle."""

    async def subscriptions(request: web.Request) -> web.Response:
        return web.json_response([]) if request.method == "GET" else web.Response(status=204)

    async def channel(request: web.Request) -> web.Response:
        return web.json_response({}) if request.method == "PUT" else web.Response(status=204)

    async def connect(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for _ in ws:
            pass
        return ws

    app = web.Application()
    app.router.add_route("*", "/v2/subscriptions", subscriptions)
    app.router.add_route("*", "/v2/notification/websocket", channel)
    app.router.add_get("/v2/notification/websocket-connect", connect)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_tcp_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def _metric(http: aiohttp.ClientSession, name: str) -> float:
    async with http.get("/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[-1])
    return 0.0


async def _fleet(service: ServiceProcess, devices: int, args: argparse.Namespace) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    collector = Collector(devices)
    serialization = {"serialization": {"type": "v2", "max_chunk_size": 10000, "cfg": {"include_timestamp": True}}}
    workers = max(args.workers, math.ceil(devices / SOCKETS_PER_WORKER))
    async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
        async with http.put("/v2/subscriptions", json=[{"resource-path": [PATH]}]) as r:
            assert r.status == 202, r.status
        async with http.put("/v2/notification/websocket", json=serialization) as r:
            assert r.status in (200, 201), await r.text()
        ws = await http.ws_connect("/v2/notification/websocket-connect", max_msg_size=64 * 1024 * 1024)

        async def read() -> None:
            async for frame in ws:
                collector.take(json.loads(frame.data))

        reader = asyncio.create_task(read())
        stub, stub_url = await _stub_application()
        ramp = devices / args.register_rate
        command = service.simulate_command(
            devices,
            *("--rate", str(args.rate / devices), "--register-rate", str(args.register_rate)),
            *("--hot-path", "--non", "--workers", str(workers), "--bind", "127.0.0.0/24", "--lifetime", "600"),
            *("--duration", str(60 + 5 * ramp + args.warmup + args.runs * args.seconds + 30)),  # past the deadline
            *("--app", stub_url, "--api-key", "stub"),
        )
        errors = tempfile.TemporaryFile()  # not a pipe: a chatty simulator would block on a full one
        simulate = await asyncio.create_subprocess_exec(
            *command, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True
        )
        try:
            started = time.perf_counter()
            deadline = started + 60 + 5 * ramp
            registered, last, settled = 0.0, -1.0, 0
            # all registered, or nearly all and no more for 5 s: on a busy machine a few devices give up (their
            # CoAP retransmissions time out) and do not come back within a run
            while registered < devices and not (registered >= 0.95 * devices and settled >= 10):
                registered = await _metric(http, "devicehub_registered_devices")
                settled = settled + 1 if registered == last else 0
                last = registered
                if time.perf_counter() > deadline and registered >= 0.5 * devices:
                    break  # a busy machine's ramp that trickles on: measured with what registered (`registered`)
                if simulate.returncode is not None or time.perf_counter() > deadline:
                    errors.seek(0)
                    raise SystemExit(f"{devices} devices did not register: {errors.read()[-3000:].decode()}")
                await asyncio.sleep(0.5)
            registered_s = time.perf_counter() - started
            await asyncio.sleep(args.warmup)
            assert service.process is not None
            pid = service.process.pid
            rates, cpu_us = [], []
            profiler = None
            if args.profile:  # collapsed stacks of the service over the windows (py-spy), one file per fleet size
                profile = Path(args.profile) / f"fleet-{devices}.txt"
                profiler = await asyncio.create_subprocess_exec(
                    "py-spy", "record", "--pid", str(pid), "--format", "raw", "--output", str(profile),
                    "--duration", str(round(args.runs * args.seconds)), "--rate", "200", "--threads",
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            elif args.perf:  # native frames of the event-loop thread (dict probes, the Rust lane, the kernel)
                profiler = await asyncio.create_subprocess_exec(
                    "perf", "record", "-F", "1999", "-g", "-t", str(pid),
                    "-o", str(Path(args.perf) / f"fleet-{devices}.data"),
                    "--", "sleep", str(round(args.runs * args.seconds)),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            collector.started = time.time()
            for _ in range(args.runs):
                collector.count, collector.measuring = 0, True
                cpu, start = cpu_seconds([pid]), time.perf_counter()
                await asyncio.sleep(args.seconds)
                elapsed, cpu = time.perf_counter() - start, cpu_seconds([pid]) - cpu
                collector.measuring = False
                rates.append(collector.count / elapsed)
                cpu_us.append(cpu / max(collector.count, 1) * 1e6)
            if profiler is not None:
                await profiler.wait()
        finally:
            os.killpg(simulate.pid, signal.SIGKILL)  # its workers too; the service that knew the devices goes next
            await simulate.wait()
            errors.close()
            await ws.close()
            reader.cancel()
            await stub.cleanup()
    # a payload that is a value, not a send time (a notification off the hot path), reads as decades late
    p50, p99 = _p50_p99([latency for latency in collector.latencies if latency < 3600])
    return {
        "devices": devices,
        "rate_per_device": args.rate / devices,
        "workers": workers,
        "registered": registered,
        "registered_s": round(registered_s, 1),
        "delivered_per_s": rates,
        "cpu_us_per_event": cpu_us,
        "cpu_us_per_event_median": statistics.median(cpu_us),
        "latency_p50_ms": p50,
        "latency_p99_ms": p99,
    }


def _plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fleets = result["fleets"]
    x = [f["devices"] for f in fleets]
    fig, (cpu, latency) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    fig.suptitle(f"fleet_bench: {result['offered_per_s']:,.0f} NON events/s in total, one WebSocket", fontsize=10)
    cpu.plot(x, [f["cpu_us_per_event_median"] for f in fleets], marker="o", color="#1d3557", label="devicehub")
    relay = result.get("relay")
    if relay is not None:
        cpu.axhline(relay["cpu_us_per_event_median"], color="#e63946", linestyle="--", label="bare relay (200)")
    cpu.set_ylabel("service CPU per event (µs)")
    cpu.set_ylim(bottom=0)
    cpu.legend(loc="lower right")
    latency.plot(x, [f["latency_p50_ms"] for f in fleets], marker="o", label="p50")
    latency.plot(x, [f["latency_p99_ms"] for f in fleets], marker="o", label="p99")
    latency.set_ylabel("device → WebSocket (ms)")
    latency.set_xlabel("devices (same total rate)")
    latency.set_xscale("log")
    latency.set_ylim(bottom=0)
    latency.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleets", default="200,10000,50000", help="fleet sizes, comma-separated")
    parser.add_argument("--rate", type=float, default=10_000.0, help="NON notifications per second in total")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3, help="measurement windows per fleet (the median is kept)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after the last registration")
    parser.add_argument("--register-rate", type=float, default=1000.0, help="(the devices notify as they join)")
    parser.add_argument("--workers", type=int, default=2, help="simulate's worker processes (at least)")
    parser.add_argument("--no-relay", action="store_true", help="skip the bare relay baseline")
    parser.add_argument("--tag", default="", help="results file fleet-<tag>.json (old and new code side by side)")
    parser.add_argument("--profile", default="", help="a directory: py-spy's collapsed stacks of each run there")
    parser.add_argument("--perf", default="", help="a directory: `perf record` of the event-loop thread, per fleet")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.fleets, args.rate, args.seconds, args.runs, args.warmup = "20,200", 400.0, 1.0, 1, 1.0
    sizes = [int(n) for n in args.fleets.split(",")]
    relay: dict[str, Any] | None = None
    if not args.no_relay:
        relay_args = argparse.Namespace(
            devices=sizes[0], rate=args.rate, window=16, non=True, warmup=args.warmup, runs=args.runs,
            seconds=args.seconds,
        )  # fmt: skip
        seen, latencies = uvloop.run(_measure_relay(relay_args))
        p50, p99 = _p50_p99(latencies)
        relay = {
            "devices": sizes[0],
            "delivered_per_s": seen.rates,
            "cpu_us_per_event": seen.cpu_us,
            "cpu_us_per_event_median": statistics.median(seen.cpu_us),
            "latency_p50_ms": p50,
            "latency_p99_ms": p99,
        }
    fleets = []
    for devices in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            service = ServiceProcess(data_dir=Path(tmp) / "data").start()
            try:
                fleets.append(uvloop.run(_fleet(service, devices, args)))
            finally:
                service.stop()
    smallest = fleets[0]["cpu_us_per_event_median"]
    for fleet in fleets:
        fleet["cpu_ratio_to_smallest"] = fleet["cpu_us_per_event_median"] / smallest
        if relay is not None:  # issue 30 #3: the service's p99 against the bare relay's, same run
            fleet["p99_ratio_to_relay"] = fleet["latency_p99_ms"] / relay["latency_p99_ms"]
    result = {
        "offered_per_s": args.rate,
        "fleets": fleets,
        "relay": relay,
        "load_average": os.getloadavg(),
        "machine": platform.machine(),
    }
    if not args.smoke:  # a smoke run's figures are not the bench's
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / f"fleet{'-' + args.tag if args.tag else ''}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        _plot(result, out.with_suffix(".png"))
    cells = "; ".join(
        f"{f['devices']:,} × {f['rate_per_device']:g}/s: {statistics.median(f['delivered_per_s']):,.0f}/s, "
        f"{f['cpu_us_per_event_median']:.1f} µs ({f['cpu_ratio_to_smallest']:.2f}×), "
        f"p50 {f['latency_p50_ms']:.1f} p99 {f['latency_p99_ms']:.1f} ms"
        + (f" ({f['p99_ratio_to_relay']:.1f}× the relay's)" if "p99_ratio_to_relay" in f else "")
        for f in fleets
    )
    print(
        f"fleet ({args.rate:,.0f} NON events/s in total, CPU per event against the smallest fleet's): {cells}"
        + (
            f"; bare relay {relay['cpu_us_per_event_median']:.1f} µs, p99 {relay['latency_p99_ms']:.1f} ms"
            if relay is not None
            else ""
        )
    )


if __name__ == "__main__":
    main()
