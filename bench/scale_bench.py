"""Scale on one node (issue 16 #5): `devicehub serve` (embedded store) and `devicehub simulate --workers W
--bind 127.0.0.0/24`, three phases:

1. ramp: N devices register (offered at --register-rate) with registration updates running (lifetime --lifetime);
   time until the node holds all N (`devicehub_registered_devices` in /metrics, polled: a measurement, not a test);
2. storm: the simulator is killed (no de-registration) and a new one re-registers all N within --storm-window
   seconds; time until the node counted N more registrations, registrations/s, Registers shed (5.03 + Max-Age),
   device-side failures, the node's CPU per registration;
3. steady notifications (Pelion flavour: its auto-observed resource, `--rate` changes per device per second) for
   --steady seconds: notifications/s received by the node.
Then GET /v3/devices?limit=1000 (and include=total_count) latency at N, and the node's RSS after each phase.
Prints one summary line and writes bench/results/scale.json (`--smoke`: 300 devices, seconds).
Reproduce: `python bench/scale_bench.py --devices 100000` (see bench/README.md for the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
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

RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"
DEVICES_PER_WORKER = 12_500  # sockets per simulator process: well below the 20 000 file descriptors
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def metrics(base_url: str) -> dict[str, float]:
    """/metrics as {name{labels}: value}, without the `devicehub_` prefix and the `_total` suffix."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^devicehub_([a-z0-9_]+?)(?:_total)?(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if match:
            values[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return values


REGISTERED = "registered_devices"
REGISTRATIONS = 'registrations{outcome="accepted"}'
SHED = 'registrations{outcome="shed"}'
UPDATES = "registration_updates"
NOTIFICATIONS = "notifications"


def process_stats(pid: int) -> tuple[float, float]:
    """(RSS in MB, CPU seconds so far) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
    return rss, cpu


def simulator(
    service: ServiceProcess, args: argparse.Namespace, register_rate: float, rate: float
) -> subprocess.Popen[str]:
    workers = max(1, -(-args.devices // DEVICES_PER_WORKER))
    return subprocess.Popen(
        [
            sys.executable, "-m", "devicehub", "simulate",
            "--server", service.coap_uri,
            "--count", str(args.devices),
            "--workers", str(workers),
            "--bind", "127.0.0.0/24",
            "--prefix", "scale-",
            "--flavor", "pelion",
            "--non",
            "--lifetime", str(args.lifetime),
            "--register-rate", str(register_rate / workers),
            "--rate", str(rate),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its worker processes are stopped with it
    )  # fmt: skip


class NotReached(Exception):
    def __init__(self, name: str, reached: float, timeout: float) -> None:
        super().__init__(f"{name} reached only {reached:.0f} within {timeout:.0f} s")
        self.reached = reached


def wait_for(base_url: str, name: str, target: float, timeout: float) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if metrics(base_url).get(name, 0) >= target:
            return time.perf_counter() - start
        time.sleep(0.2)
    raise NotReached(name, metrics(base_url).get(name, 0), timeout)


def get_latency(base_url: str, key: str, query: str, runs: int = 5) -> float:
    """Median milliseconds of GET /v3/devices?{query}."""
    times = []
    for _ in range(runs):
        request = urllib.request.Request(f"{base_url}/v3/devices?{query}", headers={"Authorization": f"Bearer {key}"})
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def stop(process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    """Stop a simulator and its workers; what it printed (its report comes before its devices de-register)."""
    if process.poll() is None:
        os.killpg(process.pid, sig)
    try:
        out, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
    return out or ""


def sim_report(output: str) -> dict[str, Any]:
    for line in output.splitlines():
        if line.startswith("report: "):
            return dict(json.loads(line[len("report: ") :]))
    return {}


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"devices": args.devices}
    with tempfile.TemporaryDirectory() as tmp:
        service = ServiceProcess(data_dir=Path(tmp) / "data", extra_args=("--log-level", "warning")).start()
        assert service.process is not None
        pid = service.process.pid
        base = service.base_url
        try:
            # 1. ramp, updates running
            rss0, _ = process_stats(pid)
            ramp = simulator(service, args, args.register_rate, 0.0)
            try:
                try:
                    ramp_s = wait_for(base, REGISTERED, args.devices, args.timeout)
                except NotReached as short:  # the largest size reached is the figure, and the run ends here
                    result["ramp_not_reached"] = {"registered": short.reached, "timeout_s": args.timeout}
                    result["registrations_shed"] = metrics(base).get(SHED, 0)
                    result["rss_end_mb"] = round(process_stats(pid)[0], 1)
                    return result
                result["ramp_s"] = round(ramp_s, 2)
                result["rss_after_ramp_mb"] = round(process_stats(pid)[0], 1)
                before = metrics(base)
                time.sleep(args.hold)  # updates keep coming meanwhile (a measurement window)
                after = metrics(base)
                result["updates_during_hold"] = int(after.get(UPDATES, 0) - before.get(UPDATES, 0))
                result["registered_after_hold"] = int(after.get(REGISTERED, 0))
            finally:
                stop(ramp, signal.SIGKILL)  # a network outage: no de-registration
            # 2. storm: every device re-registers within the window
            before = metrics(base)
            _, cpu0 = process_stats(pid)
            storm = simulator(service, args, args.devices / args.storm_window, args.notify_rate)
            try:
                target = before.get(REGISTRATIONS, 0) + args.devices
                storm_s = wait_for(base, REGISTRATIONS, target, args.timeout)
                _, cpu1 = process_stats(pid)
                after = metrics(base)
                result["storm_s"] = round(storm_s, 2)
                result["storm_registrations_per_s"] = round(args.devices / storm_s, 1)
                result["storm_shed"] = int(after.get(SHED, 0) - before.get(SHED, 0))
                result["cpu_ms_per_registration"] = round((cpu1 - cpu0) * 1000 / args.devices, 3)
                result["rss_after_storm_mb"] = round(process_stats(pid)[0], 1)
                # 3. steady notifications
                before, start = metrics(base), time.perf_counter()
                time.sleep(args.steady)
                after, elapsed = metrics(base), time.perf_counter() - start
                notified = after.get(NOTIFICATIONS, 0) - before.get(NOTIFICATIONS, 0)
                result["notifications_per_s"] = round(notified / elapsed, 1)
                result["registered_at_end"] = int(after.get(REGISTERED, 0))
                result["get_devices_limit_1000_ms"] = round(get_latency(base, service.api_key, "limit=1000"), 1)
                result["get_devices_total_count_ms"] = round(
                    get_latency(base, service.api_key, "limit=2&include=total_count"), 1
                )
                result["rss_end_mb"] = round(process_stats(pid)[0], 1)
                result["rss_start_mb"] = round(rss0, 1)
            finally:
                report = sim_report(stop(storm))
            result["simulator"] = {k: report.get(k) for k in ("failures", "notifications", "workers", "registrations")}
        finally:
            service.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--register-rate", type=float, default=1000.0, help="ramp: registrations offered per second")
    parser.add_argument("--lifetime", type=int, default=300)
    parser.add_argument("--hold", type=float, default=30.0, help="seconds at N with updates before the storm")
    parser.add_argument("--storm-window", type=float, default=10.0)
    parser.add_argument("--notify-rate", type=float, default=0.2, help="value changes per device per second")
    parser.add_argument("--steady", type=float, default=30.0, help="seconds of steady notifications")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--smoke", action="store_true", help="300 devices, seconds")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.register_rate, args.hold, args.steady, args.lifetime = 300, 300.0, 2.0, 3.0, 60
        args.storm_window, args.timeout = 2.0, 120.0
    started = time.perf_counter()
    result = run(args)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    if "ramp_not_reached" in result:
        result["command"] = "python bench/scale_bench.py " + " ".join(sys.argv[1:])
        if not args.smoke:
            RESULTS.parent.mkdir(exist_ok=True)
            RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(
            f"scale: {args.devices} devices NOT reached: {result['ramp_not_reached']}; shed "
            f"{result['registrations_shed']:.0f}; RSS {result['rss_end_mb']} MB"
        )
        sys.exit(1)
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    result["command"] = "python bench/scale_bench.py " + " ".join(sys.argv[1:])
    if not args.smoke:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"scale: {result['devices']} devices in {result['ramp_s']} s; storm {result['storm_registrations_per_s']} "
        f"registrations/s ({result['storm_shed']} shed), {result['cpu_ms_per_registration']} ms CPU/registration; "
        f"{result['notifications_per_s']} notifications/s; RSS {result['rss_end_mb']} MB; GET /v3/devices "
        f"{result['get_devices_limit_1000_ms']} ms (limit 1000), "
        f"{result['get_devices_total_count_ms']} ms (total_count)"
    )


if __name__ == "__main__":
    main()
