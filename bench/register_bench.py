"""Registration ramp: `devicehub serve` (embedded store) + `devicehub simulate --count N`, time until the service
lists all N devices as registered (issue 8: 1000 within 10 s on this machine).

The simulator starts devices at `--register-rate` per second (each on its own UDP socket); the service side is
read through `GET /v3/devices?filter=state%3Dregistered` (polled every 50 ms: a measurement, not a test).
Baseline, same run: the simulator's own ramp time (N / register-rate), the least any server could take.
Prints one summary line and writes bench/results/register.json.
Reproduce: `python bench/register_bench.py --devices 1000 --runs 3`. `--smoke`: a few seconds.

`--measure-cpu` (issue 16 #1): CPU-seconds of the `serve` process per registration, from /proc (its threads'
scheduler runtime, else utime + stime) before the simulator starts and once the node is idle again after all N
registered, less the node's idle CPU over the same time, so independent of what else loads the machine. Same-run
baseline: a bare asyncio UDP server (this file, `--baseline-server`) that parses only the CoAP header and answers
2.01 Created to every request from the same simulator load (`devicehub simulate --flavor pelion --workers W --bind
127.0.0.0/24 --rate 0`); printed as a ratio. Writes bench/results/register_cpu.json.
Reproduce: `python bench/register_bench.py --devices 5000 --measure-cpu --runs 3`.

`--measure-cpu --store-compare` (issue 30 #5): the same registrations against an embedded node and against a node
on a real redis-server, alternately in each run; Redis mode's CPU counts the node and redis-server
(`INFO server` process_id). Once all are registered, `GET /v3/devices?limit=1000` is timed (median of 20 calls)
on each. Prints the ratios Redis/SQLite and writes bench/results/register_stores.json.
Reproduce: `python bench/register_bench.py --devices 5000 --measure-cpu --store-compare --runs 3`.
`--waves N` (fifteenth session): both nodes up at once and N waves of `--devices` new devices registered on each in
turn (which goes first alternates), so that each ratio compares two measurements seconds apart on the same machine
state; a pair's ratio is the median of its waves'. Load from other work moves a lone run's ratio by +-0.2 on a shared
machine. Reproduce: `python bench/register_bench.py --measure-cpu --store-compare --devices 3000 --waves 5 --runs 1
--register-rate 1000`.
"""

from __future__ import annotations

import argparse
import asyncio
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
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.ports import free_udp_port  # noqa: E402
from support.service import ServiceProcess  # noqa: E402
from support.waiting import wait_until  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "register.json"
CPU_RESULTS = Path(__file__).resolve().parent / "results" / "register_cpu.json"
STORES_RESULTS = Path(__file__).resolve().parent / "results" / "register_stores.json"
LIST_CALLS = 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
DEVICES_PER_WORKER = 2_500  # simulator processes: the simulator must not be what limits the node


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
                service.simulate_command(
                    devices,
                    "--prefix",
                    "ramp-",
                    "--rate",
                    "0",
                    "--register-rate",
                    str(register_rate),
                ),
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


# ---- --measure-cpu ----------------------------------------------------------------------------------------------
def cpu_seconds(pid: int, task: int | None = None) -> float:
    """CPU time of a process so far (the sum over its threads), or of one of its threads: the scheduler's runtime in
    nanoseconds (/proc/<pid>/task/<tid>/schedstat), else utime + stime in clock ticks (/proc/<pid>/stat).

    Fifteenth session: ticks are 10 ms, and the idle rate taken off a run (`_idle_rate`, 2 s) moved by a tick's worth
    (0.005 CPU-s/s) from one reading to the next, ~0.013 ms per registration over a 3 000-device run of 8 s: a few
    per cent of the Redis/embedded ratio. The runtime is exact; a thread that ended within a window drops its time
    from the sum (the nodes and redis-server keep theirs: a pool's threads live as long as the process)."""
    try:
        tasks = [task] if task is not None else [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        total = 0
        for tid in tasks:
            with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                with open(f"/proc/{pid}/task/{tid}/schedstat") as schedstat:
                    total += int(schedstat.read().split()[0])
        return total / 1e9
    except (FileNotFoundError, PermissionError, ValueError, IndexError):
        pass  # no schedstat (a kernel without it): the ticks
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    with open(path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class _Bare(asyncio.DatagramProtocol):
    """Answers every confirmable request 2.01 Created (Location-Path rd/<n>) and parses nothing beyond the header."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.answered = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if len(data) < 4 or data[0] >> 4 & 3 != 0 or self.transport is None:  # only CON requests are answered
            return
        tkl = data[0] & 0x0F
        self.answered += 1
        location = str(self.answered).encode()
        # ACK, 2.01, same message id and token; Location-Path (8) "rd", then (delta 0) the number
        header = bytes((0x60 | tkl, 0x41)) + data[2:4] + data[4 : 4 + tkl]
        self.transport.sendto(header + b"\x82rd" + bytes((len(location),)) + location, addr)


def baseline_server(port: int) -> None:
    async def serve() -> None:
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(_Bare, local_addr=("127.0.0.1", port))
        print("baseline: ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


def cpu_simulator(server: str, devices: int, register_rate: float, prefix: str = "cpu-") -> subprocess.Popen[str]:
    workers = max(1, -(-devices // DEVICES_PER_WORKER))
    return subprocess.Popen(
        [
            sys.executable, "-m", "devicehub", "simulate",
            "--server", server,
            "--count", str(devices),
            "--workers", str(workers),
            "--bind", "127.0.0.0/24",
            "--prefix", prefix,
            "--flavor", "pelion",
            "--lifetime", "3600",  # no registration update within the run
            "--rate", "0",
            "--register-rate", str(register_rate / workers),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip


def _watch_registered(sim: subprocess.Popen[str], devices: int) -> threading.Event:
    """Set once the simulator's progress line says all `devices` are registered (it prints one a second)."""
    done = threading.Event()

    def read() -> None:
        assert sim.stderr is not None
        for line in sim.stderr:
            if line.startswith(f"registered {devices}/{devices}"):
                done.set()
        done.set()  # the simulator ended: the wait below fails on its own check

    threading.Thread(target=read, daemon=True).start()
    return done


def _stop_simulator(sim: subprocess.Popen[str]) -> None:
    if sim.poll() is None:
        os.killpg(sim.pid, signal.SIGKILL)  # no de-registration: it would be measured otherwise
    sim.wait(timeout=60)


def _cpu_of(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def _idle_rate(pid: list[int], seconds: float = 2.0) -> float:
    before = _cpu_of(pid)
    time.sleep(seconds)  # a measurement window, not a synchronisation
    return (_cpu_of(pid) - before) / seconds


def measure_process(
    pid: int,
    server: str,
    devices: int,
    register_rate: float,
    timeout: float,
    also: tuple[int, ...] = (),
    prefix: str = "cpu-",
) -> dict[str, float]:
    """CPU-seconds of `pid` (and of the processes `also`, e.g. its redis-server) spent on `devices` registrations
    from one simulator, less their idle CPU meanwhile."""
    pids = [pid, *also]
    idle = _idle_rate(pids)
    start, cpu0, main0, also0 = time.perf_counter(), _cpu_of(pids), cpu_seconds(pid, pid), _cpu_of(list(also))
    sim = cpu_simulator(server, devices, register_rate, prefix)
    try:
        done = _watch_registered(sim, devices)
        if not done.wait(timeout) or sim.poll() is not None:
            raise RuntimeError(f"not all {devices} devices registered within {timeout} s")
        registered = time.perf_counter() - start
        # the node answers before it stores: wait for its batches (and Pelion auto-observations) to end
        quiet_since, last = time.perf_counter(), _cpu_of(pids)
        while time.perf_counter() - quiet_since < 1.0:
            time.sleep(0.25)
            now = _cpu_of(pids)
            if now - last > (idle * 0.25) + 1.5 / CLOCK_TICKS:
                quiet_since = time.perf_counter()
            last = now
        elapsed, cpu1, main1, also1 = (
            time.perf_counter() - start,
            _cpu_of(pids),
            cpu_seconds(pid, pid),
            _cpu_of(list(also)),
        )
    finally:
        _stop_simulator(sim)
    used = cpu1 - cpu0 - idle * elapsed
    return {
        "cpu_s": used,
        "ms_per_registration": used * 1000 / devices,
        # the event loop's thread; the rest is the SQLite writer and reader threads
        "main_thread_ms_per_registration": (main1 - main0) * 1000 / devices,
        "registered_s": registered,
        "idle": idle,
        # of which the other processes (a Redis node's redis-server), their idle CPU not taken off
        "also_ms_per_registration": (also1 - also0) * 1000 / devices,
    }


def cpu_run(devices: int, register_rate: float, timeout: float, log_level: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        service = ServiceProcess(data_dir=Path(tmp) / "data", extra_args=("--log-level", log_level)).start()
        try:
            assert service.process is not None
            node = measure_process(service.process.pid, service.coap_uri, devices, register_rate, timeout)
            shed = _metric(service.base_url, 'registrations_total{outcome="shed"}')
        finally:
            service.stop()
    port = free_udp_port()
    bare = subprocess.Popen(
        [sys.executable, __file__, "--baseline-server", str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert bare.stdout is not None
        bare.stdout.readline()
        base = measure_process(bare.pid, f"coap://127.0.0.1:{port}", devices, register_rate, timeout)
    finally:
        bare.terminate()
        bare.wait(timeout=10)
    return {
        "node_ms": node["ms_per_registration"],
        "node_main_thread_ms": node["main_thread_ms_per_registration"],
        "baseline_ms": base["ms_per_registration"],
        "ratio": node["ms_per_registration"] / base["ms_per_registration"],
        "node_registered_s": node["registered_s"],
        "shed": shed,
    }


def _metric(base_url: str, name: str) -> float:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f"devicehub_{name} "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def measure_cpu(args: argparse.Namespace) -> None:
    runs = [cpu_run(args.devices, args.register_rate, args.timeout, args.log_level) for _ in range(args.runs)]
    median: Callable[[str], float] = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
    result = {
        "devices": args.devices,
        "register_rate": args.register_rate,
        "log_level": args.log_level,
        "runs": runs,
        "node_ms_per_registration": median("node_ms"),
        "node_main_thread_ms_per_registration": median("node_main_thread_ms"),
        "baseline_ms_per_registration": median("baseline_ms"),
        "ratio": median("ratio"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "command": "python bench/register_bench.py " + " ".join(sys.argv[1:]),
    }
    if not args.smoke:
        CPU_RESULTS.parent.mkdir(parents=True, exist_ok=True)
        CPU_RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    each = ", ".join(f"{r['node_ms']:.3f}" for r in runs)
    print(
        f"register cpu: {result['node_ms_per_registration']:.3f} ms of serve CPU per registration "
        f"(median of {args.runs}, {args.devices} devices; event-loop thread "
        f"{result['node_main_thread_ms_per_registration']:.3f} ms, the rest SQLite threads); bare UDP baseline "
        f"{result['baseline_ms_per_registration']:.3f} ms; ratio {result['ratio']:.1f} "
        f"(runs: {each} ms)"
    )


# ---- --store-compare --------------------------------------------------------------------------------------------
def list_latency_ms(base_url: str, key: str) -> float:
    """Median wall time of `GET /v3/devices?limit=1000` over LIST_CALLS calls on one kept-alive connection."""
    import http.client

    connection = http.client.HTTPConnection(base_url.removeprefix("http://"), timeout=30)
    times = []
    try:
        for _ in range(LIST_CALLS):
            start = time.perf_counter()
            connection.request("GET", "/v3/devices?limit=1000", headers={"Authorization": f"Bearer {key}"})
            response = connection.getresponse()
            body = json.loads(response.read())
            times.append((time.perf_counter() - start) * 1000)
            if response.status != 200 or not body.get("data"):
                raise RuntimeError(f"device list answered {response.status}")
    finally:
        connection.close()
    return statistics.median(times)


@contextlib.contextmanager
def store_node(store: str, log_level: str) -> Iterator[tuple[ServiceProcess, tuple[int, ...]]]:
    """A node on the embedded store or on a fresh redis-server, with the pids whose CPU it counts besides its own
    (its redis-server's)."""
    from support.redis_server import redis_server

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        extra: tuple[str, ...] = ("--log-level", log_level)
        also: tuple[int, ...] = ()
        if store == "redis":
            import redis

            url = stack.enter_context(redis_server())
            with redis.Redis.from_url(url) as client:
                also = (int(cast(dict[str, Any], client.info("server"))["process_id"]),)
            extra += ("--redis-url", url)
        service = ServiceProcess(data_dir=Path(tmp) / "data", extra_args=extra).start()
        try:
            assert service.process is not None
            yield service, also
        finally:
            service.stop()


def _measure_list(node: dict[str, float], service: ServiceProcess, also: tuple[int, ...]) -> None:
    assert service.process is not None
    pids = [service.process.pid, *also]
    cpu0 = _cpu_of(pids)
    node["list_ms"] = list_latency_ms(service.base_url, service.api_key)
    node["list_cpu_ms"] = (_cpu_of(pids) - cpu0) * 1000 / LIST_CALLS


def store_run(store: str, devices: int, register_rate: float, timeout: float, log_level: str) -> dict[str, float]:
    with store_node(store, log_level) as (service, also):
        assert service.process is not None
        node = measure_process(service.process.pid, service.coap_uri, devices, register_rate, timeout, also)
        _measure_list(node, service, also)
    return node


def waves_run(args: argparse.Namespace) -> dict[str, Any]:
    """`--waves N`: both nodes up at once, N waves of `--devices` new devices each, registered on the embedded node
    and on the Redis node one after the other (which goes first alternates); the pair's figures are the medians of
    the waves' (each wave's ratio is of two measurements seconds apart, not of two nodes' runs a minute apart). The
    listing is timed once, after the last wave, on the fleet of all waves."""
    with store_node("sqlite", args.log_level) as embedded, store_node("redis", args.log_level) as on_redis:
        nodes = {"sqlite": embedded, "redis": on_redis}
        waves: list[dict[str, dict[str, float]]] = []
        for wave in range(args.waves):
            measured: dict[str, dict[str, float]] = {}
            for store in ("sqlite", "redis") if wave % 2 == 0 else ("redis", "sqlite"):
                service, also = nodes[store]
                assert service.process is not None
                measured[store] = measure_process(
                    service.process.pid,
                    service.coap_uri,
                    args.devices,
                    args.register_rate,
                    args.timeout,
                    also,
                    prefix=f"cpu-w{wave}-",
                )
            waves.append(measured)
        pair: dict[str, Any] = {
            store: {
                key: statistics.median(w[store][key] for w in waves)
                for key in (
                    "ms_per_registration",
                    "main_thread_ms_per_registration",
                    "also_ms_per_registration",
                    "registered_s",
                    "idle",
                )
            }
            for store in nodes
        }
        for store, (service, also) in nodes.items():
            _measure_list(pair[store], service, also)
    pair["wave_ratios"] = [w["redis"]["ms_per_registration"] / w["sqlite"]["ms_per_registration"] for w in waves]
    pair["ratio"] = statistics.median(pair["wave_ratios"])
    pair["waves"] = waves
    return pair


def store_compare(args: argparse.Namespace) -> None:
    pairs = []
    for _ in range(args.runs):
        if args.waves:
            pairs.append(waves_run(args))
            continue
        sqlite = store_run("sqlite", args.devices, args.register_rate, args.timeout, args.log_level)
        redis_ = store_run("redis", args.devices, args.register_rate, args.timeout, args.log_level)
        pairs.append({"sqlite": sqlite, "redis": redis_})
    median: Callable[[str, str], float] = lambda store, key: statistics.median(p[store][key] for p in pairs)  # noqa: E731
    cpu_ratio = statistics.median(
        p.get("ratio", p["redis"]["ms_per_registration"] / p["sqlite"]["ms_per_registration"]) for p in pairs
    )
    result = {
        "devices": args.devices,
        "register_rate": args.register_rate,
        "waves": args.waves,
        "pairs": pairs,
        "sqlite_ms_per_registration": median("sqlite", "ms_per_registration"),
        "redis_ms_per_registration": median("redis", "ms_per_registration"),
        "redis_over_sqlite_cpu": cpu_ratio,
        "sqlite_list_1000_ms": median("sqlite", "list_ms"),
        "redis_list_1000_ms": median("redis", "list_ms"),
        "sqlite_list_1000_cpu_ms": median("sqlite", "list_cpu_ms"),
        "redis_list_1000_cpu_ms": median("redis", "list_cpu_ms"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "command": "python bench/register_bench.py " + " ".join(sys.argv[1:]),
    }
    if not args.smoke:
        STORES_RESULTS.parent.mkdir(parents=True, exist_ok=True)
        STORES_RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    waves = f" of {args.waves} waves' medians" if args.waves else ""
    print(
        f"register stores: {result['redis_ms_per_registration']:.3f} ms CPU per registration in Redis mode (node + "
        f"redis-server) vs {result['sqlite_ms_per_registration']:.3f} ms embedded, ratio {cpu_ratio:.2f} "
        f"(median of {args.runs} pairs{waves}, {args.devices} devices); GET /v3/devices?limit=1000 "
        f"{result['redis_list_1000_ms']:.1f} ms Redis vs {result['sqlite_list_1000_ms']:.1f} ms embedded (CPU "
        f"{result['redis_list_1000_cpu_ms']:.1f} vs {result['sqlite_list_1000_cpu_ms']:.1f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--register-rate", type=float, default=500.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--measure-cpu", action="store_true", help="serve CPU per registration vs a bare UDP server")
    parser.add_argument(
        "--store-compare", action="store_true", help="--measure-cpu: Redis mode against the embedded store, alternately"
    )
    parser.add_argument("--log-level", default="warning", help="--measure-cpu: the node's --log-level")
    parser.add_argument(
        "--waves",
        type=int,
        default=0,
        help="--store-compare: both nodes up at once, N waves of --devices new devices alternately on each; a pair's "
        "ratio is the median of its waves' (0: one node at a time, one wave each, as before)",
    )
    parser.add_argument("--baseline-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_server:
        baseline_server(args.baseline_server)
        return
    if args.smoke:
        args.devices, args.runs = (200 if args.measure_cpu else 20), 1
        args.waves = min(args.waves, 2)
    if args.measure_cpu and args.store_compare:
        store_compare(args)
        return
    if args.measure_cpu:
        measure_cpu(args)
        return
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
