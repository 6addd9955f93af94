"""The simulated devices of one process: made from the settings and the scenario, spread over local addresses
(`--bind`), started at the register rate, varied, churned, and counted (issue 16 #4)."""

from __future__ import annotations

import asyncio
import itertools
import operator
import random
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from typing import TypeVar
from urllib.parse import urlsplit

from devicehub.clock import Clock, SystemClock
from devicehub.config import SimulateSettings
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.security import ClientCredentials, client_credentials
from devicehub.sim.bootstrap import BootstrapClient
from devicehub.sim.device import OmaBehaviour, SimDevice
from devicehub.sim.firmware import FirmwareFaults, SimFirmware
from devicehub.sim.registration import SHUTDOWN_TIMING
from devicehub.sim.scenario import Churn, DeviceSpec, devices, scenario_of

T = TypeVar("T")
HOT_TICK = 0.002  # the hot path's loop turn: the notifications owed since the last one go out as one batch
HOT_MAX_OWED_S = 1.0  # notifications owed beyond a second's worth are dropped (counted as `hot_behind`)
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
