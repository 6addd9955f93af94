"""`devicehub simulate`: N simulated devices in one process, ramped up, with a live progress line."""

from __future__ import annotations

import asyncio
import random
import signal
import sys
from collections import Counter
from urllib.parse import urlsplit

from devicehub.clock import Clock, SystemClock
from devicehub.config import SimulateSettings
from devicehub.lwm2m.dtls_client import ClientCredentials
from devicehub.lwm2m.transport import Address
from devicehub.sim.bootstrap import BootstrapClient
from devicehub.sim.device import OmaBehaviour, SimDevice

PROGRESS_INTERVAL = 1.0


def server_address(uri: str) -> Address:
    """`coap://host:port`, `coap+tcp://host:port` or `coaps://host:port` → (host, port); the port defaults to 5683
    or 5684."""
    parts = urlsplit(uri)
    if parts.scheme not in ("coap", "coaps", "coap+tcp") or not parts.hostname:
        raise ValueError(f"--server must look like coap://host:5683 or coaps://host:5684, not {uri!r}")
    return parts.hostname, parts.port or (5684 if parts.scheme == "coaps" else 5683)


def credentials(settings: SimulateSettings, endpoint_name: str) -> ClientCredentials | None:
    """The DTLS credentials of one device for a `coaps://` server (issue 13 #7); the PSK identity defaults to
    the endpoint name, so one `--psk-key` serves a fleet whose names each have that key."""
    if not settings.server.startswith("coaps:"):
        return None
    if settings.cert:
        return ClientCredentials(cert_file=settings.cert, key_file=settings.key or settings.cert)
    if not settings.psk_key:
        raise ValueError("a coaps:// server needs --psk-key (with --psk-identity) or --cert/--key")
    key = settings.psk_key[2:] if settings.psk_key[:2].lower() == "0x" else settings.psk_key
    return ClientCredentials(psk_identity=settings.psk_identity or endpoint_name, psk_key=bytes.fromhex(key))


class Fleet:
    """The devices of one `simulate` run."""

    def __init__(self, settings: SimulateSettings, clock: Clock | None = None, *, seed: int | None = None) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.rng = random.Random(seed)
        server = server_address(settings.server)
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
                f"{settings.prefix}{n}",
                endpoint_type=settings.endpoint_type,
                lifetime=settings.lifetime,
                queue_mode=settings.queue_mode,
                flavor=settings.flavor,
                oma=oma,
                security=credentials(settings, f"{settings.prefix}{n}"),
                tcp=settings.server.startswith("coap+tcp:"),
            )
            for n in range(settings.count)
        ]
        if settings.bootstrap:
            for device in self.devices:
                device.bootstrap = BootstrapClient(device.model, self.clock, device.endpoint_name, settings.bootstrap)
        self._varying: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start every device at `register_rate` per second; value changes begin as each one registers."""
        gap = 1.0 / self.settings.register_rate if self.settings.register_rate > 0 else 0.0
        for device in self.devices:
            await device.start()
            self._varying.append(asyncio.create_task(device.vary(self.settings.rate, random.Random(self.rng.random()))))
            if gap:
                await self.clock.sleep(gap)

    async def wait_registered(self) -> None:
        await asyncio.gather(*(device.registered.wait() for device in self.devices))

    async def stop(self) -> None:
        for task in self._varying:
            task.cancel()
        await asyncio.gather(*self._varying, return_exceptions=True)
        await asyncio.gather(*(device.stop() for device in self.devices))

    def progress(self) -> str:
        registered = sum(d.registered.is_set() for d in self.devices)
        notifications = sum(d.counters.notifications for d in self.devices)
        notifying = sum(d.counters.notifications > 0 for d in self.devices)
        errors = sum(d.counters.errors for d in self.devices)
        failures = sum(d.counters.register_failures for d in self.devices)
        line = (
            f"registered {registered}/{len(self.devices)}  notifying {notifying}  "
            f"notifications {notifications}  errors {errors}"
        )
        if self.settings.bootstrap:
            bootstrapped = sum(d.counters.bootstraps > 0 for d in self.devices)
            bootstrap_failures = sum(d.counters.bootstrap_failures for d in self.devices)
            line += f"  bootstrapped {bootstrapped}  bootstrap failures {bootstrap_failures}"
        line += f"  registration failures {failures}"
        reasons = self.failure_reasons()
        return line + (f" ({reasons})" if reasons else "")

    def ever_registered(self) -> int:
        return sum(d.counters.registrations > 0 for d in self.devices)

    def failure_reasons(self) -> str:
        """The reasons of the devices' last registration failures, most common first: `why (n devices); …`."""
        reasons = Counter(d.last_failure for d in self.devices if d.last_failure and not d.registered.is_set())
        return "; ".join(f"{why} ({n} device{'s' if n > 1 else ''})" for why, n in reasons.most_common(3))


async def simulate(settings: SimulateSettings) -> int:
    fleet = Fleet(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if settings.duration > 0:
        loop.call_later(settings.duration, stop.set)
    starting = asyncio.create_task(fleet.start())
    live = sys.stderr.isatty()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), PROGRESS_INTERVAL)
        except TimeoutError:
            pass
        print(("\r" if live else "") + fleet.progress(), end="" if live else "\n", file=sys.stderr, flush=True)
    starting.cancel()
    await asyncio.gather(starting, return_exceptions=True)
    await fleet.stop()
    print(("\n" if live else "") + "stopped: " + fleet.progress(), file=sys.stderr, flush=True)
    if fleet.ever_registered() == 0:
        why = fleet.failure_reasons() or "no answer from the server yet (is devicehub serve running there?)"
        print(f"devicehub simulate: no device registered with {settings.server}: {why}", file=sys.stderr, flush=True)
        return 1
    return 0
