"""`devicehub simulate`: the fleet in one process or several (`--workers`), with a live progress line and a final
report (issue 16 #4)."""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import os
import queue
import signal
import sys
import time
from typing import Any

from devicehub.clock import Clock, SystemClock
from devicehub.config import SimulateSettings
from devicehub.sim.fleet import Fleet, bootstrap_credentials, credentials, progress_line
from devicehub.sim.latency import LatencyProbe
from devicehub.sim.open_files import ensure_room
from devicehub.sim.scenario import devices, scenario_of
from devicehub.startup import starting as starting_step

PROGRESS_INTERVAL = 1.0
# a simulate process's cyclic GC (issue 16): a young collection every 50 000 allocations, not 700; the devices are
# long-lived and make next to no cycles, and with the default a third of a device's start and registration was GC
# passes over the growing fleet
GC_YOUNG_THRESHOLD = 50_000
DEREGISTER_WAIT_S = 60.0


class _Report:
    """Rates over the run, from successive snapshots."""

    def __init__(self, workers: list[dict[str, Any]]) -> None:
        self.started = time.monotonic()
        self.all_registered_after: float | None = None
        self.workers = workers

    def see(self, totals: dict[str, int]) -> None:
        if self.all_registered_after is None and totals["devices"] and totals["registered"] == totals["devices"]:
            self.all_registered_after = time.monotonic() - self.started

    def final(self, totals: dict[str, int], probe: LatencyProbe | None = None) -> dict[str, Any]:
        elapsed = time.monotonic() - self.started
        ramp = self.all_registered_after
        report = {
            "devices": totals["devices"],
            "registered": totals["registered"],
            "seconds": round(elapsed, 2),
            "all_registered_after_s": None if ramp is None else round(ramp, 2),
            "registrations_per_s": round(totals["registrations"] / (ramp or elapsed), 1) if elapsed else 0.0,
            "registrations": totals["registrations"],
            "updates": totals["updates"],
            "failures": {
                "busy_503": totals["busy"],
                "timeouts": totals["timeouts"],
                "rejected": totals["rejected"],
                "bootstrap": totals["bootstrap_failures"],
            },
            "notifications": {
                "sent": totals["notifications"],
                "acked": totals["acked"],
                "per_s": round(totals["notifications"] / elapsed, 1) if elapsed else 0.0,
                "hot_path": totals.get("hot_sent", 0),
                "hot_behind": totals.get("hot_behind", 0),
            },
            "churn": {"restarts": totals["restarts"], "vanished": totals["vanished"]},
            "not_started": totals.get("not_started", 0),  # devices whose socket could not be opened
            "workers": self.workers,
        }
        if probe is not None:  # device send → application receive, milliseconds
            report["latency_ms"] = probe.summary()
        return report


def _sum(snapshots: list[dict[str, int]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for snapshot in snapshots:
        for name, value in snapshot.items():
            totals[name] = totals.get(name, 0) + value
    return totals


def _print_progress(line: str, live: bool) -> None:
    print(("\r" if live else "") + line, end="" if live else "\n", file=sys.stderr, flush=True)


async def start_probe(settings: SimulateSettings, clock: Clock) -> LatencyProbe | None:
    """The application end of `--app` (sim/latency.py), before any device registers: an OMA device is observed on
    the presubscription only if it is there when the device registers."""
    if not settings.app:
        return None
    flavors = {spec.flavor for spec in devices(settings, scenario_of(settings))}
    probe = LatencyProbe(settings.app, settings.api_key, clock, flavors)
    await probe.start()
    return probe


def quiet_gc() -> None:
    """The GC of a simulate process (its own, never a caller's that builds a `Fleet`): what exists so far (the
    imports, then the fleet) is frozen out of collections, and young collections are rarer."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


async def simulate(settings: SimulateSettings, clock: Clock | None = None) -> int:
    with starting_step("the simulated devices"):  # a bad key or a missing file: one line, before any worker starts
        credentials(settings, "credential-check-0001")
        bootstrap_credentials(settings, "credential-check-0001")
    ensure_room(sum(group.count for group in scenario_of(settings).groups), settings.workers)
    if settings.workers > 1:
        return await _simulate_in_workers(settings)
    quiet_gc()
    fleet = Fleet(settings, clock)
    gc.freeze()
    probe = await start_probe(settings, fleet.clock)
    stop = _stop_event(settings.duration or scenario_of(settings).duration or 0.0)
    report = _Report([{"worker": 0, "pid": os.getpid(), "devices": len(fleet.devices)}])
    starting = asyncio.create_task(fleet.start())
    live = sys.stderr.isatty()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), PROGRESS_INTERVAL)
        except TimeoutError:
            pass
        report.see(fleet.snapshot())
        _print_progress(fleet.progress() + (probe.progress() if probe else ""), live)
    starting.cancel()
    await asyncio.gather(starting, return_exceptions=True)
    totals = fleet.snapshot()
    print("report: " + json.dumps(report.final(totals, probe)), flush=True)
    if probe is not None:
        await probe.stop()
    await fleet.stop()
    print(("\n" if live else "") + "stopped: " + fleet.progress(), file=sys.stderr, flush=True)
    if fleet.ever_registered() == 0:
        why = fleet.failure_reasons() or "no answer from the server yet (is devicehub serve running there?)"
        print(f"devicehub simulate: no device registered with {settings.server}: {why}", file=sys.stderr, flush=True)
        return 1
    return 0


def _stop_event(duration: float) -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if duration > 0:
        loop.call_later(duration, stop.set)
    return stop


# ---- several processes -----------------------------------------------------------------------------------
def _worker(settings: SimulateSettings, index: int, reports: Any, done: Any) -> None:
    """A worker process: its share of the devices, its counters sent to the parent every second."""
    # the parent decides when to stop (a Ctrl-C or a SIGTERM to the process group reaches it too) and collects
    # each worker's report first; a worker whose parent is gone stops by itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()

    async def main() -> None:
        quiet_gc()
        fleet = Fleet(settings, worker=index)
        gc.freeze()
        starting = asyncio.create_task(fleet.start())
        loop = asyncio.get_running_loop()
        while not await loop.run_in_executor(None, done.wait, PROGRESS_INTERVAL) and os.getppid() == parent:
            reports.put((index, os.getpid(), fleet.snapshot(), False))
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        reports.put((index, os.getpid(), fleet.snapshot(), True))  # the report need not wait for de-registrations
        await fleet.stop()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        asyncio.run(main())


async def _simulate_in_workers(settings: SimulateSettings) -> int:
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    done = context.Event()
    processes = [
        context.Process(target=_worker, args=(settings, index, reports, done), name=f"simulate-{index}", daemon=True)
        for index in range(settings.workers)
    ]
    probe = await start_probe(settings, SystemClock())
    for process in processes:
        process.start()
    stop = _stop_event(settings.duration or scenario_of(settings).duration or 0.0)
    latest: dict[int, dict[str, int]] = {}
    pids: dict[int, int] = {}
    finished: set[int] = set()
    report = _Report([])
    live = sys.stderr.isatty()

    def drain() -> None:
        while True:
            try:
                index, pid, snapshot, final = reports.get_nowait()
            except queue.Empty:
                return
            latest[index], pids[index] = snapshot, pid
            if final:
                finished.add(index)

    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), PROGRESS_INTERVAL)
        except TimeoutError:
            pass
        drain()
        if latest:
            totals = _sum(list(latest.values()))
            report.see(totals)
            _print_progress(
                progress_line(totals, bootstrap=bool(settings.bootstrap)) + (probe.progress() if probe else ""), live
            )
        if any(not p.is_alive() for p in processes) and len(finished) < len(processes):
            print("\na worker process died", file=sys.stderr)
            stop.set()
    done.set()
    loop = asyncio.get_running_loop()
    end = loop.time() + 30
    while len(finished) < len(processes) and loop.time() < end and any(p.is_alive() for p in processes):
        await asyncio.sleep(0.05)
        drain()
    totals = _sum(list(latest.values()))
    report.workers = [
        {"worker": i, "pid": pids.get(i), "devices": latest.get(i, {}).get("devices", 0)} for i in range(len(processes))
    ]
    print("report: " + json.dumps(report.final(totals, probe)), flush=True)
    if probe is not None:
        await probe.stop()
    for process in processes:  # the devices de-register on the way out
        process.join(timeout=DEREGISTER_WAIT_S)
    print(
        ("\n" if live else "") + "stopped: " + progress_line(totals, bootstrap=bool(settings.bootstrap)),
        file=sys.stderr,
        flush=True,
    )
    return 0 if len(finished) == len(processes) else 1
