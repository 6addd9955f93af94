"""`devicehub simulate`: simulated devices in one process or several (`--workers`), spread over local addresses
(`--bind`), ramped up, with a live progress line and a final report (issue 16 #4)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import multiprocessing
import operator
import os
import queue
import random
import signal
import sys
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from devicehub.clock import Clock, SystemClock
from devicehub.config import SimulateSettings
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.security import ClientCredentials, client_credentials
from devicehub.sim.bootstrap import BootstrapClient
from devicehub.sim.device import OmaBehaviour, SimDevice
from devicehub.sim.firmware import FirmwareFaults, SimFirmware
from devicehub.sim.latency import LatencyProbe
from devicehub.sim.open_files import ensure_room
from devicehub.sim.registration import SHUTDOWN_TIMING
from devicehub.sim.scenario import Churn, DeviceSpec, devices, scenario_of
from devicehub.startup import starting as starting_step

T = TypeVar("T")
PROGRESS_INTERVAL = 1.0
# a simulate process's cyclic GC (issue 16): a young collection every 50 000 allocations, not 700; the devices are
# long-lived and make next to no cycles, and with the default a third of a device's start and registration was GC
# passes over the growing fleet
GC_YOUNG_THRESHOLD = 50_000
HOT_TICK = 0.002  # the hot path's loop turn: the notifications owed since the last one go out as one batch
HOT_MAX_OWED_S = 1.0  # notifications owed beyond a second's worth are dropped (counted as `hot_behind`)
DEREGISTER_WAIT_S = 60.0
COUNTERS = (
    "registrations",
    "updates",
    "notifications",
    "acked",
    "busy",
    "timeouts",
    "rejected",
    "errors",
    "bootstraps",
    "bootstrap_failures",
    "register_failures",
)
_counter_values = operator.attrgetter(*COUNTERS)


def server_address(uri: str) -> Address:
    """`coap://host:port`, `coap+tcp://host:port`, `coaps://host:port` or `coaps+tcp://host:port` → (host, port);
    the port defaults to 5683, or 5684 for the secure schemes (RFC 7252 §6.2, RFC 8323 §8.2)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("coap", "coaps", "coap+tcp", "coaps+tcp") or not parts.hostname:
        raise ValueError(f"--server must look like coap://host:5683 or coaps://host:5684, not {uri!r}")
    return parts.hostname, parts.port or (5684 if parts.scheme.startswith("coaps") else 5683)


def credentials(settings: SimulateSettings, endpoint_name: str) -> ClientCredentials | None:
    """The (D)TLS credentials of one device for a `coaps://` or `coaps+tcp://` server (issue 13 #7), as
    `security.client_credentials`."""
    return client_credentials(
        settings.server,
        endpoint_name,
        psk_identity=settings.psk_identity,
        psk_key=settings.psk_key,
        cert=settings.cert,
        key=settings.key,
    )


def bootstrap_credentials(settings: SimulateSettings, endpoint_name: str) -> ClientCredentials | None:
    """The credentials of one device for a `coaps://` bootstrap server (issue 28 #6): the same options as `--server`."""
    return client_credentials(
        settings.bootstrap,
        endpoint_name,
        psk_identity=settings.psk_identity,
        psk_key=settings.psk_key,
        cert=settings.cert,
        key=settings.key,
    )


async def at_rate(clock: Clock, per_second: float, items: Iterable[T]) -> AsyncIterator[T]:
    """`items`, the i-th no earlier than i / `per_second` after the first (all at once if `per_second` <= 0).
    Due times are absolute: a sleep that overshoots (timers are ms-grained) or a slow step is made up by not
    sleeping before the next ones, so the offered rate holds on average. Sleeping the gap after each step instead
    offered about half the rate asked for at 1 000/s per process: a storm bench measured the simulator."""
    gap = 1.0 / per_second if per_second > 0 else 0.0
    started = clock.now()
    for index, item in enumerate(items):
        if gap:
            wait = started + index * gap - clock.now()
            if wait > 0:
                await clock.sleep(wait)
        yield item


def _share(name: str, what: str) -> float:
    """A number in 0-100 fixed by the device's name: the same devices fail in every run (and in every worker)."""
    return zlib.crc32(f"{what}:{name}".encode()) % 10_000 / 100


class Fleet:
    """The devices of one `simulate` run, or of one worker process of it."""

    def __init__(
        self,
        settings: SimulateSettings,
        clock: Clock | None = None,
        *,
        seed: int | None = None,
        worker: int | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.rng = random.Random(seed)
        server = server_address(settings.server)
        scenario = scenario_of(settings)
        self.churn: Churn = scenario.churn
        self.register_rate = scenario.register_rate or settings.register_rate
        self.specs: list[DeviceSpec] = [
            spec for spec in devices(settings, scenario) if worker is None or spec.worker == worker
        ]
        oma = OmaBehaviour(
            restart_observe_seq=settings.observe_restart,
            block_size=settings.block_size,
            max_payload=settings.max_payload or None,
            full_list_updates=settings.full_list_updates,
        )
        self.devices = [
            SimDevice(
                self.clock,
                server,
                spec.name,
                endpoint_type=spec.endpoint_type,
                lifetime=spec.lifetime,
                queue_mode=spec.queue_mode,
                flavor=spec.flavor,
                host=spec.host,
                oma=oma,
                security=credentials(settings, spec.name),
                tcp=settings.server.startswith(("coap+tcp:", "coaps+tcp:")),
            )
            for spec in self.specs
        ]
        for device in self.devices:
            if settings.non:
                device.confirmable_notifications = False
            if settings.bootstrap:
                device.bootstrap = BootstrapClient(
                    device.model,
                    self.clock,
                    device.endpoint_name,
                    settings.bootstrap,
                    bootstrap_credentials(settings, device.endpoint_name),
                )
        if settings.firmware:  # issue 33: object 5, the failures asked for spread over the devices by their names
            for device in self.devices:
                faults = FirmwareFaults(
                    corrupt=_share(device.endpoint_name, "corrupt") < settings.firmware_corrupt_percent,
                    refuse=_share(device.endpoint_name, "refuse") < settings.firmware_refuse_percent,
                    reboot_at=settings.firmware_reboot_at or None,
                )
                device.firmware = SimFirmware(device, faults)
        self.restarts = 0
        self.vanished = 0
        self.not_started = 0  # devices whose socket could not be opened
        self.not_started_why = ""
        self.hot_sent = 0  # notifications the hot path sent (the rest of the changes took the normal path)
        self.hot_behind = 0  # changes the hot path could not send in time (the process is at full CPU)
        self._varying: list[asyncio.Task[None]] = []
        self._churning: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start every device at the register rate; value changes begin as each one registers."""
        if self.churn.restart > 0 or self.churn.vanish > 0:
            self._churning = asyncio.create_task(self._churn())
        if self.settings.hot_path:
            self._varying.append(asyncio.create_task(self._pace()))
        async for spec, device in at_rate(self.clock, self.register_rate, zip(self.specs, self.devices, strict=True)):
            try:
                await device.start()
            except OSError as error:  # no socket for it (open files, addresses): counted and said, not silent
                self.not_started += 1
                self.not_started_why = error.strerror or str(error)
                continue
            if not self.settings.hot_path:
                seed = self.rng.random()  # drawn for every device, so a device's seed does not depend on the others'
                if spec.rate > 0:  # a device that never varies needs no task (issue 16: a storm starts thousands)
                    self._varying.append(asyncio.create_task(device.vary(spec.rate, random.Random(seed))))

    async def _pace(self) -> None:
        """The hot path: the devices' value changes as one Poisson stream (the sum of theirs: each change goes to a
        device drawn in proportion to its rate), sent in one batch per loop turn."""
        rates = [spec.rate for spec in self.specs]
        total = sum(rates)
        if total <= 0 or not self.devices:
            return
        cumulative = list(itertools.accumulate(rates))
        rng, clock, devices = random.Random(self.rng.random()), self.clock, self.devices
        # the payload is the send time, for the application to measure latency
        stamp = bool(self.settings.app) or self.settings.stamp
        owed, last = 0.0, clock.now()
        while True:
            await clock.sleep(HOT_TICK)
            now = clock.now()
            owed += total * (now - last)
            last = now
            if owed > total * HOT_MAX_OWED_S:
                self.hot_behind += int(owed - total * HOT_MAX_OWED_S)
                owed = total * HOT_MAX_OWED_S
            batch = int(owed)
            owed -= batch
            uniform = rng.uniform
            for device in rng.choices(devices, cum_weights=cumulative, k=batch):
                payload = f"{clock.now():.6f}".encode() if stamp else None
                if device.hot_path.notify(now, uniform(-0.5, 0.5), payload):
                    self.hot_sent += 1
                else:
                    device.vary_once(rng)

    async def _churn(self) -> None:
        """Restart or drop a random device now and then (rates per device per hour, scenario `churn`)."""
        per_second = (self.churn.restart + self.churn.vanish) * len(self.devices) / 3600
        while True:
            await self.clock.sleep(self.rng.expovariate(per_second))
            live = [d for d in self.devices if d.registered.is_set()]
            if not live:
                continue
            device = self.rng.choice(live)
            await device.stop(deregister=False)
            if self.rng.random() < self.churn.restart / (self.churn.restart + self.churn.vanish):
                self.restarts += 1
                device.registered.clear()
                await device.start()
            else:
                self.vanished += 1
                device.registered.clear()

    async def wait_registered(self) -> None:
        await asyncio.gather(*(device.registered.wait() for device in self.devices))

    async def stop(self) -> None:
        if self._churning is not None:
            self._churning.cancel()
            await asyncio.gather(self._churning, return_exceptions=True)
        for task in self._varying:
            task.cancel()
        await asyncio.gather(*self._varying, return_exceptions=True)
        for device in self.devices:  # issue 32 #5: with the server gone, SIGTERM took 84 s to exit
            device.deregister_timing = SHUTDOWN_TIMING
        await asyncio.gather(*(device.stop() for device in self.devices))

    def snapshot(self) -> dict[str, int]:
        """Counters summed over the devices (what a worker reports to the parent, once a second). Read a device at a
        time by one `attrgetter` and summed by column: a loop of `getattr` per counter took ~25 ms a second in each
        worker of 12 500 devices, a fifth of a core over 8 workers doing nothing else (issue 16: the simulators share
        the machine with the node in a storm)."""
        rows = [_counter_values(device.counters) for device in self.devices]
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(COUNTERS)
        totals = {name: sum(column) for name, column in zip(COUNTERS, columns, strict=True)}
        totals["devices"] = len(self.devices)
        totals["registered"] = sum(d.registered.is_set() for d in self.devices)
        totals["notifying"] = sum(n > 0 for n in columns[COUNTERS.index("notifications")])
        totals["restarts"], totals["vanished"] = self.restarts, self.vanished
        totals["hot_sent"], totals["hot_behind"] = self.hot_sent, self.hot_behind
        totals["not_started"] = self.not_started
        return totals

    def progress(self) -> str:
        line = progress_line(self.snapshot(), bootstrap=bool(self.settings.bootstrap))
        reasons = self.failure_reasons()
        return line + (f" ({reasons})" if reasons else "")

    def ever_registered(self) -> int:
        return sum(d.counters.registrations > 0 for d in self.devices)

    def failure_reasons(self) -> str:
        """The reasons of the devices' last registration failures, most common first: `why (n devices); …`."""
        reasons = Counter(d.last_failure for d in self.devices if d.last_failure and not d.registered.is_set())
        if self.not_started:
            reasons[f"could not start: {self.not_started_why}"] = self.not_started
        return "; ".join(f"{why} ({n} device{'s' if n > 1 else ''})" for why, n in reasons.most_common(3))


def progress_line(totals: dict[str, int], *, bootstrap: bool = False) -> str:
    line = (
        f"registered {totals['registered']}/{totals['devices']}  notifying {totals['notifying']}  "
        f"notifications {totals['notifications']}  errors {totals['errors']}"
    )
    if bootstrap:
        line += f"  bootstrapped {totals['bootstraps']}  bootstrap failures {totals['bootstrap_failures']}"
    line += f"  registration failures {totals['register_failures']}"
    if totals.get("not_started"):
        line += f"  not started {totals['not_started']}"
    if totals["busy"] or totals["timeouts"] or totals["acked"]:
        line += f"  acked {totals['acked']}  busy(5.03) {totals['busy']}  timeouts {totals['timeouts']}"
    return line


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
