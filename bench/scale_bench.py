"""Scale on one node (issue 16 #5): `devicehub serve` (embedded store) and `devicehub simulate --workers W
--bind 127.0.0.0/24`, three phases (`--redis`: two nodes on one redis-server, half of the devices on each, one
simulator per node on its own loopback /24; the figures are the two nodes' sums, RSS per node and Redis's):

1. ramp: N devices register (offered at --register-rate) with registration updates running (lifetime --lifetime);
   time until the node holds all N (`devicehub_registered_devices` in /metrics, polled: a measurement, not a test);
2. storm: the simulator is killed (no de-registration) and a new one re-registers all N within --storm-window
   seconds; time from its first Register until the node counted N more registrations (`storm_launch_s`: from its
   launch, its processes' start-up included), registrations/s, Registers shed (5.03 + Max-Age),
   device-side failures, the node's CPU per registration;
3. steady notifications (Pelion flavour: its auto-observed resource, `--notify-rate` changes per device per second,
   which the storm's simulator runs from each registration on unless `--storm-notify-rate` says otherwise) for
   --steady seconds: notifications/s received by the node. By default the simulators vary each device's values
   (a task per device) and notify the observed resource's changes, one change in twenty (its battery): 0.2 changes
   per device per second are ~0.01 notifications. `--hot-path` sends every change as a notification of the observed
   resource from a datagram encoded once per observation: `--hot-path --notify-rate 0.01` offers the node the same
   notifications at a fraction of the simulators' CPU, which on a 2-core machine is the node's neighbour.
Then GET /v3/devices?limit=1000 (and include=total_count) latency at N, and the node's RSS after each phase.
A timeline samples /metrics once a second through all three phases (`python bench/plot.py` draws it).
Prints one summary line and writes bench/results/scale.json (`--smoke`: 300 devices, seconds).
Reproduce: `python bench/scale_bench.py --devices 100000` (see bench/README.md for the figures).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.redis_server import redis_server  # noqa: E402
from support.service import ServiceProcess  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEVICES_PER_WORKER = 12_500  # sockets per simulator process: well below the 20 000 file descriptors
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def metrics(base_url: str) -> dict[str, float]:
    """/metrics as {name{labels}: value}, without the `devicehub_` prefix and the `_total` suffix."""
    for attempt in range(5):  # an overloaded node may answer one scrape 503 (its store timed out): ask again
        try:
            with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as response:
                text = response.read().decode()
            break
        except urllib.error.HTTPError as error:
            if error.code != 503 or attempt == 4:
                raise
            time.sleep(1.0)
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
BACKLOG = "registration_backlog"
DROPS = 'udp_receive_drops{listener="coap"}'
SAMPLE_S = 1.0  # the timeline's cadence


def process_stats(pid: int) -> tuple[float, float]:
    """(RSS in MB, CPU seconds so far) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
    return rss, cpu


def summed(bases: list[str]) -> dict[str, float]:
    """The nodes' /metrics added up (every figure this bench reads is a counter or a per-node gauge)."""
    total: dict[str, float] = {}
    for base in bases:
        for name, value in metrics(base).items():
            total[name] = total.get(name, 0.0) + value
    return total


def redis_rss_mb(url: str) -> float:
    """used_memory_rss of the redis-server, from INFO memory (redis-cli from the Debian package)."""
    out = subprocess.run(["redis-cli", "-u", url, "info", "memory"], capture_output=True, text=True, check=True)
    line = next(line for line in out.stdout.splitlines() if line.startswith("used_memory_rss:"))
    return int(line.split(":")[1]) / 1e6


class Simulators:
    """One `devicehub simulate` per node, each with its share of the devices on its own loopback /24."""

    def __init__(self, nodes: list[ServiceProcess], args: argparse.Namespace, register_rate: float, rate: float):
        share = args.devices // len(nodes)
        self.processes = [
            simulator(node, share, index, args, register_rate / len(nodes), rate) for index, node in enumerate(nodes)
        ]

    def stop(self, sig: int = signal.SIGTERM) -> list[dict[str, Any]]:
        return [sim_report(stop(process, sig)) for process in self.processes]


def simulator(
    service: ServiceProcess, devices: int, index: int, args: argparse.Namespace, register_rate: float, rate: float
) -> subprocess.Popen[str]:
    workers = max(1, -(-devices // DEVICES_PER_WORKER))
    return subprocess.Popen(
        service.simulate_command(
            devices,
            "--workers", str(workers),
            "--bind", f"127.0.{index}.0/24",
            "--prefix", f"scale-{index}-",
            "--flavor", "pelion",
            "--non",
            *(("--hot-path",) if args.hot_path else ()),
            "--lifetime", str(args.lifetime),
            "--register-rate", str(register_rate / workers),
            "--rate", str(rate),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its worker processes are stopped with it
    )  # fmt: skip


class NotReached(Exception):
    def __init__(self, name: str, reached: float, timeout: float) -> None:
        super().__init__(f"{name} reached only {reached:.0f} within {timeout:.0f} s")
        self.reached = reached


def wait_for(bases: list[str], name: str, target: float, timeout: float) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if summed(bases).get(name, 0) >= target:
            return time.perf_counter() - start
        time.sleep(0.2)
    raise NotReached(name, summed(bases).get(name, 0), timeout)


class Timeline:
    """/metrics once a second through the whole run, in a thread: the registered devices, the registrations, sheds and
    kernel receive drops counted so far, the backlog and the nodes' RSS, each sample labelled with the phase it
    was taken in (`bench/plot.py` draws it)."""

    def __init__(self, bases: list[str], pids: list[int]) -> None:
        self.samples: list[dict[str, Any]] = []
        self.phase = "ramp"
        self._bases, self._pids = bases, pids
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="timeline", daemon=True)
        self._start = time.perf_counter()
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            try:
                values = summed(self._bases)
            except OSError:  # a node busy past the scrape's time-out: a gap in the plot, not a failed run
                continue
            self.samples.append(
                {
                    "t": round(time.perf_counter() - self._start, 2),
                    "phase": self.phase,
                    "registered": int(values.get(REGISTERED, 0)),
                    "registrations": int(values.get(REGISTRATIONS, 0)),
                    "shed": int(values.get(SHED, 0)),
                    "backlog": int(values.get(BACKLOG, 0)),
                    "receive_drops": int(values.get(DROPS, 0)),
                    "rss_mb": rss_mb(self._pids),
                    # cumulative CPU-seconds of the nodes and of the whole machine (every process, both cores): their
                    # difference per second is what the simulators (and the rest) took, so a plot shows which one
                    # was the limit at each moment of a storm
                    "node_cpu_s": round(cpu_s(self._pids), 2),
                    "machine_cpu_s": round(machine_busy_s(), 2),
                }
            )

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join()
        return self.samples


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


def results_file(args: argparse.Namespace) -> Path:
    return RESULTS_DIR / ("scale-redis.json" if args.redis else "scale.json")


def start_nodes(stack: contextlib.ExitStack, tmp: Path, args: argparse.Namespace) -> list[ServiceProcess]:
    quiet = ("--log-level", "warning")
    if not args.redis:
        node = ServiceProcess(data_dir=tmp / "data", extra_args=quiet).start()
        stack.callback(node.stop)
        return [node]
    url = stack.enter_context(redis_server())
    args.redis_url = url
    node_a = ServiceProcess(data_dir=tmp / "a", extra_args=(*quiet, "--redis-url", url)).start()
    stack.callback(node_a.stop)
    (tmp / "b").mkdir()
    (tmp / "b" / "dev-api-key").write_text(node_a.api_key + "\n")  # one account, one key, on both nodes
    node_b = ServiceProcess(data_dir=tmp / "b", extra_args=(*quiet, "--redis-url", url)).start()
    stack.callback(node_b.stop)
    return [node_a, node_b]


def rss_mb(pids: list[int]) -> float:
    return round(sum(process_stats(pid)[0] for pid in pids), 1)


def machine_busy_s() -> float:
    """CPU-seconds every core of the machine spent not idle since boot (/proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def cpu_s(pids: list[int]) -> float:
    return sum(process_stats(pid)[1] for pid in pids)


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"devices": args.devices, "nodes": 2 if args.redis else 1}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        nodes = start_nodes(stack, Path(tmp), args)
        pids = [node.process.pid for node in nodes if node.process is not None]
        bases = [node.base_url for node in nodes]
        if args.redis:
            stack.callback(lambda: result.setdefault("redis_rss_end_mb", round(redis_rss_mb(args.redis_url), 1)))
        timeline = Timeline(bases, pids)
        stack.callback(lambda: result.setdefault("timeline", timeline.stop()))
        # 1. ramp, updates running
        rss0 = rss_mb(pids)
        ramp = Simulators(nodes, args, args.register_rate, 0.0)
        try:
            try:
                ramp_s = wait_for(bases, REGISTERED, args.devices, args.timeout)
            except NotReached as short:  # the largest size reached is the figure, and the run ends here
                result["ramp_not_reached"] = {"registered": short.reached, "timeout_s": args.timeout}
                result["registrations_shed"] = summed(bases).get(SHED, 0)
                result["rss_end_mb"] = rss_mb(pids)
                return result
            result["ramp_s"] = round(ramp_s, 2)
            result["rss_after_ramp_mb"] = rss_mb(pids)
            before = summed(bases)
            timeline.phase = "hold"
            time.sleep(args.hold)  # updates keep coming meanwhile (a measurement window)
            after = summed(bases)
            result["updates_during_hold"] = int(after.get(UPDATES, 0) - before.get(UPDATES, 0))
            result["registered_after_hold"] = int(after.get(REGISTERED, 0))
        finally:
            ramp.stop(signal.SIGKILL)  # a network outage: no de-registration
        # 2. storm: every device re-registers within the window
        timeline.phase = "storm"
        before = summed(bases)
        cpu0 = cpu_s(pids)
        storm_rate = args.notify_rate if args.storm_notify_rate is None else args.storm_notify_rate
        result["storm_notify_rate"] = storm_rate
        storm = Simulators(nodes, args, args.devices / args.storm_window, storm_rate)
        try:
            target = before.get(REGISTRATIONS, 0) + args.devices
            # the simulator's processes start (imports, N devices built) before the first Register arrives: the
            # storm is timed from then, and the launch-inclusive time is kept beside it
            starting_s = wait_for(bases, REGISTRATIONS, before.get(REGISTRATIONS, 0) + 1, args.timeout)
            storm_s = wait_for(bases, REGISTRATIONS, target, args.timeout)
            cpu1 = cpu_s(pids)
            after = summed(bases)
            result["storm_s"] = round(storm_s, 2)
            result["storm_launch_s"] = round(starting_s + storm_s, 2)
            result["storm_registrations_per_s"] = round(args.devices / storm_s, 1)
            result["storm_shed"] = int(after.get(SHED, 0) - before.get(SHED, 0))
            # datagrams the kernel dropped at the node's listener (its receive buffer full): retransmitted later
            result["storm_receive_drops"] = int(after.get(DROPS, 0) - before.get(DROPS, 0))
            result["cpu_ms_per_registration"] = round((cpu1 - cpu0) * 1000 / args.devices, 3)
            result["rss_after_storm_mb"] = rss_mb(pids)
            # 3. steady notifications
            timeline.phase = "steady"
            before, start = summed(bases), time.perf_counter()
            time.sleep(args.steady)
            after, elapsed = summed(bases), time.perf_counter() - start
            notified = after.get(NOTIFICATIONS, 0) - before.get(NOTIFICATIONS, 0)
            result["notifications_per_s"] = round(notified / elapsed, 1)
            result["registered_at_end"] = int(after.get(REGISTERED, 0))
            key = nodes[0].api_key
            result["get_devices_limit_1000_ms"] = round(get_latency(bases[0], key, "limit=1000"), 1)
            result["get_devices_total_count_ms"] = round(get_latency(bases[0], key, "limit=2&include=total_count"), 1)
            result["rss_end_mb"] = rss_mb(pids)
            result["rss_start_mb"] = rss0
        finally:
            timeline.phase = "teardown"
            reports = storm.stop()
        result["simulator"] = {
            k: [report.get(k) for report in reports] for k in ("failures", "notifications", "workers", "registrations")
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--register-rate", type=float, default=1000.0, help="ramp: registrations offered per second")
    parser.add_argument("--lifetime", type=int, default=300)
    parser.add_argument("--hold", type=float, default=30.0, help="seconds at N with updates before the storm")
    parser.add_argument("--storm-window", type=float, default=10.0)
    parser.add_argument("--notify-rate", type=float, default=0.2, help="value changes per device per second")
    parser.add_argument(
        "--storm-notify-rate",
        type=float,
        help="value changes per device per second of the storm's simulator (default --notify-rate: each device"
        " notifies from its registration on, so a storm of 100 000 runs beside up to 20 000 notifications/s; 0: a"
        " storm of registrations alone, and phase 3 then measures none)",
    )
    parser.add_argument("--steady", type=float, default=30.0, help="seconds of steady notifications")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--redis", action="store_true", help="two nodes on one redis-server, half the devices each")
    parser.add_argument(
        "--hot-path",
        action="store_true",
        help="simulators send each value change as a notification from a pre-encoded datagram (see the docstring)",
    )
    parser.add_argument("--smoke", action="store_true", help="300 devices, seconds")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.register_rate, args.hold, args.steady, args.lifetime = 300, 300.0, 2.0, 3.0, 60
        args.storm_window, args.timeout = 2.0, 120.0
    started = time.perf_counter()
    result = run(args)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    mode = " (redis, 2 nodes)" if args.redis else ""
    if "ramp_not_reached" in result:
        result["command"] = "python bench/scale_bench.py " + " ".join(sys.argv[1:])
        if not args.smoke:
            RESULTS_DIR.mkdir(exist_ok=True)
            results_file(args).write_text(json.dumps(result, indent=2) + "\n")
        print(
            f"scale{mode}: {args.devices} devices NOT reached: {result['ramp_not_reached']}; shed "
            f"{result['registrations_shed']:.0f}; RSS {result['rss_end_mb']} MB"
        )
        sys.exit(1)
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    result["command"] = "python bench/scale_bench.py " + " ".join(sys.argv[1:])
    if not args.smoke:
        RESULTS_DIR.mkdir(exist_ok=True)
        results_file(args).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"scale{mode}: {result['devices']} devices in {result['ramp_s']} s; "
        f"storm {result['storm_registrations_per_s']} registrations/s ({result['storm_shed']} shed, "
        f"{result['storm_receive_drops']} datagrams dropped by the kernel), "
        f"{result['cpu_ms_per_registration']} ms CPU/registration; "
        f"{result['notifications_per_s']} notifications/s; RSS {result['rss_end_mb']} MB; GET /v3/devices "
        f"{result['get_devices_limit_1000_ms']} ms (limit 1000), "
        f"{result['get_devices_total_count_ms']} ms (total_count)"
    )


if __name__ == "__main__":
    main()
