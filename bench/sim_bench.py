"""The simulator's notification hot path, measured alone and end to end (issue 16 #4).

Alone (default): `--devices` Pelion-flavoured devices (NON notifications) of one `Fleet` in this process register
with a counting UDP sink in another process (tests/support/lwm2m_sink.py: it answers Register and only counts), so
the simulator is what is measured. Offered `--rate` notifications/s in total (more than one process can send), each
variant runs `--seconds` and reports notifications sent per second of wall time and per CPU-second of this
process (the figure that does not depend on what else runs on the machine), and what the sink received:
- `bare`: the baseline, a Python loop sending one fixed datagram from one non-blocking socket (the ceiling);
- `normal`: the normal path: each change is `set_value`, a notification task, `coap_encode`, the transport;
- `hot`: the hot path (`--hot-path`): pre-encoded datagrams, a batch per loop turn.
Writes bench/results/sim-alone.json.

`--e2e`: `devicehub serve` (embedded store) + `devicehub simulate --hot-path --non --app … --workers 2` (the
product's own simulator, from its CLI) whose parent process is the WebSocket application; reports the events/s the
application received (median of whole seconds), the latency percentiles of the simulator's report and the load
average. Writes bench/results/sim-e2e.json.

`--register`: the simulator's CPU per device started and registered (issue 16: a registration storm must not be
limited by the simulator): `devicehub simulate --count N --workers 2 --bind 127.0.0.0/24 --flavor pelion --non
--lifetime 300 --register-rate R --rate 0` against the sink, `--runs` times; utime+stime of the simulator's
processes (parent and workers, from /proc) from launch until the sink has answered all N Registers, less the same
command's with one device per worker (the start-up: interpreters, imports), per device; the sink's own CPU per
registration is the same-run baseline. Median of the runs; writes bench/results/sim-register.json.

Reproduce: `python bench/sim_bench.py --devices 1000 --rate 100000 --seconds 5`,
`python bench/sim_bench.py --e2e --devices 2000 --rate 22000 --seconds 20` and
`python bench/sim_bench.py --register --devices 20000`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from devicehub._core import coap_encode  # noqa: E402
from devicehub.config import SimulateSettings  # noqa: E402
from devicehub.lwm2m import codes  # noqa: E402
from devicehub.sim.fleet import Fleet  # noqa: E402
from devicehub.sim.objects import BATTERY  # noqa: E402
from support.lwm2m_sink import start_sink  # noqa: E402
from support.service import ServiceProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TICK = 0.002
DEREGISTER_WAIT = 120.0


def sink_process(port: Any, received: Any, ready: Any, registered: Any, goal: Any, reached: Any) -> None:
    async def main() -> None:
        # the counts are shared as each datagram is counted
        _sink, address = await start_sink(counter=received, registered=registered, goal=goal, reached=reached)
        port.value = address[1]
        ready.set()
        await asyncio.Event().wait()  # until the bench terminates this process

    uvloop.run(main())


class Sink:
    """The counting sink in its own process."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.port = context.Value("i", 0, lock=False)
        self.received = context.Value("q", 0, lock=False)
        self.registered = context.Value("q", 0, lock=False)
        self.goal = context.Value("q", 0, lock=False)  # `reached` is set when `registered` gets there
        self.reached = context.Event()
        ready = context.Event()
        self.process = context.Process(
            target=sink_process,
            args=(self.port, self.received, ready, self.registered, self.goal, self.reached),
            daemon=True,
        )
        self.process.start()
        ready.wait(30)

    def stop(self) -> None:
        self.process.terminate()
        self.process.join()


def _figures(sent: int, received_before: int, sink: Sink, wall: float, cpu: float) -> dict[str, float]:
    return {  # received: what the sink had counted when sending ended (what is still in flight is not a rate)
        "sent_per_s": round(sent / wall),
        "sent_per_cpu_s": round(sent / cpu) if cpu else 0,
        "received_per_s": round((sink.received.value - received_before) / wall),
        "cpu_share": round(cpu / wall, 2),
    }


def bare(sink: Sink, seconds: float) -> dict[str, float]:
    """A fixed NON notification sent from one non-blocking socket as fast as a Python loop goes."""
    datagram = coap_encode(codes.NON, codes.CONTENT, 1, b"\x01\x02", [(codes.OBSERVE, b"\x01")], b"21.5")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    address = ("127.0.0.1", sink.port.value)
    before, sent = sink.received.value, 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    end = wall0 + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            try:
                sock.sendto(datagram, address)
                sent += 1
            except BlockingIOError:
                pass
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    sock.close()
    return _figures(sent, before, sink, wall, cpu)


async def _fleet(sink: Sink, args: argparse.Namespace, hot: bool) -> dict[str, float]:
    settings = SimulateSettings(
        server=f"coap://127.0.0.1:{sink.port.value}",
        count=args.devices,
        rate=args.rate / args.devices if hot else 0.0,  # the normal path: the pacer below makes the changes
        register_rate=0,
        non=True,
        hot_path=hot,
        lifetime=3600,
    )
    fleet = Fleet(settings, seed=1)
    await fleet.start()
    await asyncio.wait_for(fleet.wait_registered(), 60)
    pacer = None if hot else asyncio.create_task(_normal_pacer(fleet, args.rate))
    await asyncio.sleep(1.0)  # warm up
    before_sent, before_received = _sent(fleet), sink.received.value
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.sleep(args.seconds)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    sent = _sent(fleet) - before_sent
    if pacer is not None:
        pacer.cancel()
    figures = _figures(sent, before_received, sink, wall, cpu)
    await fleet.stop()
    return figures


def _sent(fleet: Fleet) -> int:
    return sum(device.counters.notifications for device in fleet.devices)


async def _normal_pacer(fleet: Fleet, rate: float) -> None:
    """The normal path at `rate` in total: a batch per loop turn, each change a `set_value` of the battery."""
    loop = asyncio.get_running_loop()
    devices, turn, owed, last = fleet.devices, 0, 0.0, loop.time()
    while True:
        await asyncio.sleep(TICK)
        now = loop.time()
        owed += rate * (now - last)
        last = now
        owed = min(owed, rate)
        for _ in range(int(owed)):
            device = devices[turn % len(devices)]
            turn += 1
            device.set_value(BATTERY, turn % 100)
        owed -= int(owed)


def alone(args: argparse.Namespace) -> None:
    sink = Sink()
    try:
        result: dict[str, Any] = {"bare": bare(sink, args.seconds)}
        result["normal"] = uvloop.run(_fleet(sink, args, hot=False))
        result["hot"] = uvloop.run(_fleet(sink, args, hot=True))
    finally:
        sink.stop()
    result.update(
        devices=args.devices,
        offered_per_s=args.rate,
        seconds=args.seconds,
        load_average=os.getloadavg(),
        cpus=os.cpu_count(),
        machine=platform.machine(),
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sim-alone.json").write_text(json.dumps(result, indent=2) + "\n")
    b, n, h = result["bare"], result["normal"], result["hot"]
    print(
        f"sim alone ({args.devices} devices, offered {args.rate:,.0f}/s): hot path {h['sent_per_s']:,}/s "
        f"({h['sent_per_cpu_s']:,} per CPU-second), normal path {n['sent_per_s']:,}/s "
        f"({n['sent_per_cpu_s']:,}/CPU-s), bare Python sendto loop {b['sent_per_s']:,}/s "
        f"({b['sent_per_cpu_s']:,}/CPU-s); load average {result['load_average'][0]:.2f} on {os.cpu_count()} CPUs"
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (its threads included) from /proc, 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The direct children of a process (its `simulate-N` workers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return found


def _register_run(sink: Sink, args: argparse.Namespace, count: int) -> dict[str, float]:
    """One `devicehub simulate` of `count` devices until the sink has answered all their Registers: the CPU-seconds
    the simulator's processes (parent and workers) and the sink used from the launch to then."""
    command = [
        sys.executable, "-m", "devicehub", "simulate", "--server", f"coap://127.0.0.1:{sink.port.value}",
        "--count", str(count), "--workers", str(args.workers), "--bind", args.bind, "--flavor", args.flavor, "--non",
        "--lifetime", "300", "--register-rate", str(args.register_rate), "--rate", "0",
    ]  # fmt: skip
    before, sink_before = sink.registered.value, cpu_seconds(sink.process.pid or 0)
    sink.reached.clear()
    sink.goal.value = before + count  # the sink sets `reached` when it has answered that many
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = started + 30 + count / 100
        while not sink.reached.wait(0.5):  # woken by the sink; the timeout only looks after the simulator
            if process.poll() is not None or time.perf_counter() > deadline:
                process.kill()
                _, err = process.communicate()
                raise SystemExit(f"simulate registered {sink.registered.value - before}/{count}:\n{err[-3000:]}")
        # the workers live until the terminate below: their CPU so far is all of it
        cpu = {pid: cpu_seconds(pid) for pid in [process.pid, *children(process.pid)]}
        wall = time.perf_counter() - started
        sink_cpu = cpu_seconds(sink.process.pid or 0) - sink_before
    finally:
        process.terminate()  # the devices de-register on the way out (not measured)
        try:
            process.wait(DEREGISTER_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return {"simulator_cpu_s": sum(cpu.values()), "sink_cpu_s": sink_cpu, "wall_s": wall}


def register(args: argparse.Namespace) -> None:
    """`--register`: simulator CPU per device started and registered, the fixed start-up cost taken off."""
    sink = Sink()
    try:
        fixed = _register_run(sink, args, args.workers)  # one device per worker: interpreters, imports, workers
        runs = [_register_run(sink, args, args.devices) for _ in range(args.runs)]
    finally:
        sink.stop()
    per_device = sorted((run["simulator_cpu_s"] - fixed["simulator_cpu_s"]) / args.devices for run in runs)
    sink_per_device = sorted(run["sink_cpu_s"] / args.devices for run in runs)
    median = per_device[len(per_device) // 2]
    result = {
        "devices": args.devices,
        "workers": args.workers,
        "flavor": args.flavor,
        "register_rate": args.register_rate,
        "fixed_cpu_s": round(fixed["simulator_cpu_s"], 2),
        "runs": runs,
        "simulator_cpu_ms_per_registration": [round(x * 1000, 4) for x in per_device],
        "sink_cpu_ms_per_registration": [round(x * 1000, 4) for x in sink_per_device],
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    if not args.smoke:  # a smoke run's figures are not the bench's
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "sim-register.json").write_text(json.dumps(result, indent=2) + "\n")
    total = sorted(run["simulator_cpu_s"] for run in runs)[len(runs) // 2]
    print(
        f"sim register ({args.devices} {args.flavor} devices, {args.workers} workers, --register-rate "
        f"{args.register_rate:,.0f}): simulator {median * 1000:.3f} ms CPU per device started and registered "
        f"(median of {args.runs}; {total:.2f} CPU-s in all, {fixed['simulator_cpu_s']:.2f} of them start-up taken "
        f"off), the sink {sink_per_device[len(runs) // 2] * 1000:.3f} ms; load average {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} CPUs"
    )


def e2e(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        service = ServiceProcess(data_dir=Path(tmp) / "data").start()
        try:
            command = service.simulate_command(
                args.devices,
                "--rate",
                str(args.rate / args.devices),
                "--register-rate",
                str(args.register_rate),
                "--hot-path",
                "--non",
                "--workers",
                str(args.workers),
                "--app",
                service.base_url,
                "--api-key",
                service.api_key,
                "--duration",
                str(args.seconds),
            )
            before = _datagrams_in(service.base_url)
            started = time.perf_counter()
            run = subprocess.run(command, capture_output=True, text=True, timeout=args.seconds + 120)
            datagrams_in = (_datagrams_in(service.base_url) - before) / (time.perf_counter() - started)
            load = os.getloadavg()
        finally:
            service.stop()
    lines = [line for line in run.stdout.splitlines() if line.startswith("report: ")]
    if not lines:
        raise SystemExit(f"simulate gave no report:\n{run.stdout}\n{run.stderr[-3000:]}")
    report = json.loads(lines[-1].removeprefix("report: "))
    latency = report["latency_ms"]
    result = {
        "command": " ".join(["devicehub", *command[3:]]).replace(service.api_key, "KEY"),
        "devices": args.devices,
        "offered_per_s": args.rate,
        "workers": args.workers,
        "received_per_s": latency.get("received_per_s"),
        "latency_ms": latency,
        "simulator": report["notifications"],
        "service_datagrams_in_per_s": round(datagrams_in),
        "load_average": load,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sim-e2e.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"sim e2e: one WebSocket channel received {latency.get('received_per_s', 0):,} events/s (median second) "
        f"from `devicehub simulate` ({args.devices} devices, offered {args.rate:,.0f}/s, {args.workers} workers); "
        f"latency p50 {latency['p50']} p90 {latency['p90']} p99 {latency['p99']} p99.9 {latency['p99.9']} "
        f"max {latency['max']} ms; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
    )


def _datagrams_in(base_url: str) -> float:
    """Datagrams the service has received on its CoAP endpoint (its /metrics)."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith('devicehub_coap_datagrams_total{direction="in"} '):
                return float(line.split()[-1])
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100_000.0, help="offered notifications per second in total")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--e2e", action="store_true", help="serve + simulate --app: one WebSocket channel")
    parser.add_argument("--workers", type=int, default=2, help="--e2e: simulate's worker processes")
    parser.add_argument("--register-rate", type=float, default=2000.0, help="--e2e: registrations per second")
    parser.add_argument("--register", action="store_true", help="simulator CPU per registration against the sink")
    parser.add_argument("--bind", default="127.0.0.0/24", help="--register: simulate's --bind")
    parser.add_argument("--flavor", default="pelion", help="--register: simulate's --flavor")
    parser.add_argument("--runs", type=int, default=3, help="--register: runs (the median is reported)")
    parser.add_argument("--smoke", action="store_true", help="a few seconds, small figures")
    args = parser.parse_args()
    if args.smoke:
        # e2e: the devices register and the probe presubscribes within the first second of the run
        args.devices, args.rate, args.seconds = 20, 2000.0, 3.0 if args.e2e else 1.0
        args.runs = 1
        if args.register:  # enough devices that their CPU is not lost in the start-up's run-to-run spread
            args.devices = 1000
    if args.register:
        register(args)
    else:
        e2e(args) if args.e2e else alone(args)


if __name__ == "__main__":
    main()
