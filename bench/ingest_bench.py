"""Notification ingest: CoAP datagrams in → domain `notification` events out of the LwM2M server.

The server runs in this process (uvloop, the real `LwM2MServer` with its Rust codec) with a core that only
counts events. A second process registers `--devices` Pelion-flavoured devices (each on its own UDP socket,
with an `aobs` auto-observed resource) and then drives confirmable notifications closed-loop: each device keeps
`--window` notifications in flight and sends the next one when the server's ACK comes back. The figure is
events/s reaching the core, median of `--runs` windows of `--seconds`.
Baseline, same run, same generator: a bare asyncio UDP protocol that only counts datagrams and ACKs them with a
pre-built reply (no decode, no lookup) — the ceiling Python's socket path allows; the ratio shows what the LwM2M
layer keeps of it. Prints one summary line and writes bench/results/ingest.json.
Reproduce: `python bench/ingest_bench.py --devices 100 --window 8 --seconds 3 --runs 5`. `--smoke`: seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvloop

from devicehub._core import coap_decode, coap_encode, coap_encode_uint
from devicehub.clock import SystemClock
from devicehub.domain.model import Registration, ResourceLink
from devicehub.domain.registration import Admission
from devicehub.lwm2m import codes
from devicehub.lwm2m.server import LwM2MServer
from devicehub.sim.device import PELION, SimDevice

RESULTS = Path(__file__).resolve().parent / "results" / "ingest.json"


class CountingCore:
    """A core that admits everyone and counts notifications (the domain's cost is not measured here)."""

    def __init__(self, devices: int) -> None:
        self.events = 0
        self.devices = devices
        self.registrations = 0
        self.all_registered = asyncio.Event()

    async def admit(self, endpoint_name: str, endpoint_type: str, account_id: str | None = None) -> Admission | None:
        return Admission(account_id="a" * 32, device_id=f"{hash(endpoint_name) & (1 << 128) - 1:032x}")

    async def registered_many(self, registrations: Sequence[Registration]) -> None:
        for registration in registrations:
            await self.registered(registration)

    async def registered(self, registration: Registration) -> None:
        self.registrations += 1
        if self.registrations >= self.devices:
            self.all_registered.set()

    async def updated(self, registration: Registration, added: tuple[ResourceLink, ...]) -> None:
        return None

    async def deregistered(self, registration: Registration) -> None:
        return None

    async def expired(self, registration: Registration) -> None:
        return None

    def notification(self, device_id: str, path: str, cf: int | None, payload: bytes, seq: int | None) -> None:
        self.events += 1

    def notifications(self, values: Sequence[tuple[str, str, int | None, bytes, int | None]]) -> None:
        self.events += len(values)


class BareCounter(asyncio.DatagramProtocol):
    """Baseline: count and ACK every datagram with a pre-built reply, nothing else."""

    def __init__(self) -> None:
        self.events = 0
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.events += 1
        # empty ACK with the datagram's message id (bytes 2-3), or a 2.01 for a register
        if data[1] == codes.POST:
            reply = coap_encode(
                codes.ACK,
                codes.CREATED,
                int.from_bytes(data[2:4], "big"),
                b"",
                [(codes.LOCATION_PATH, b"rd"), (codes.LOCATION_PATH, b"x"), (codes.LOCATION_PATH, b"y")],
            )
        else:
            reply = b"\x60\x00" + data[2:4]
        self.transport.sendto(reply, addr)


class Driver(asyncio.DatagramProtocol):
    """One device's notification pump: a new CON notification for each ACK received."""

    def __init__(self, token: bytes, server: tuple[str, int], window: int) -> None:
        self.token, self.server, self.window = token, server, window
        self.seq = 0
        self.mid = 0
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def start(self) -> None:
        for _ in range(self.window):
            self.send()

    def send(self) -> None:
        self.seq = (self.seq + 1) & 0xFFFFFF
        self.mid = (self.mid + 1) & 0xFFFF
        data = coap_encode(
            codes.CON,
            codes.CONTENT,
            self.mid,
            self.token,
            [(codes.OBSERVE, coap_encode_uint(self.seq)), (codes.CONTENT_FORMAT, b"")],
            str(self.seq % 100).encode(),
        )
        self.transport.sendto(data, self.server)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if len(data) >= 4 and data[0] >> 4 & 3 == codes.ACK:
            self.send()


async def _generate(server: tuple[str, int], devices: int, window: int, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    drivers = []
    for n in range(devices):
        sim = SimDevice(SystemClock(), server, f"ingest-{n}", flavor=PELION)
        await sim.start(lifecycle=False)
        await sim.register()
        sock = sim.endpoint._transport.get_extra_info("socket")  # reuse the registered source address
        sock = sock.dup()
        sim.endpoint._transport.close()
        _, driver = await loop.create_datagram_endpoint(
            lambda token=sim._auto_token: Driver(token, server, window), sock=sock
        )  # type: ignore[misc]
        drivers.append(driver)
    for driver in drivers:
        driver.start()
    await asyncio.sleep(seconds)


def generator(server: tuple[str, int], devices: int, window: int, seconds: float) -> None:
    uvloop.run(_generate(server, devices, window, seconds))


async def _windows(counter: Any, runs: int, seconds: float) -> list[float]:
    rates = []
    await asyncio.sleep(0.5)  # let registration finish and the pumps fill
    for _ in range(runs):
        before, start = counter.events, time.perf_counter()
        await asyncio.sleep(seconds)
        rates.append((counter.events - before) / (time.perf_counter() - start))
    return rates


async def measure_server(args: argparse.Namespace) -> list[float]:
    core = CountingCore(args.devices)
    server = LwM2MServer(core, SystemClock())
    await server.start("127.0.0.1", 0)
    proc = multiprocessing.get_context("spawn").Process(
        target=generator, args=(server.address, args.devices, args.window, args.runs * args.seconds + 3)
    )
    proc.start()
    try:
        await asyncio.wait_for(core.all_registered.wait(), 60)
        return await _windows(core, args.runs, args.seconds)
    finally:
        proc.terminate()
        proc.join()
        await server.stop()


async def measure_baseline(args: argparse.Namespace) -> list[float]:
    loop = asyncio.get_running_loop()
    transport, counter = await loop.create_datagram_endpoint(BareCounter, local_addr=("127.0.0.1", 0))
    address = transport.get_extra_info("sockname")[:2]
    proc = multiprocessing.get_context("spawn").Process(
        target=generator, args=(address, args.devices, args.window, args.runs * args.seconds + 3)
    )
    proc.start()
    try:
        return await _windows(counter, args.runs, args.seconds)
    finally:
        proc.terminate()
        proc.join()
        transport.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--window", type=int, default=8, help="notifications in flight per device")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.seconds, args.runs = 10, 0.5, 1
    ingest = statistics.median(uvloop.run(measure_server(args)))
    baseline = statistics.median(uvloop.run(measure_baseline(args)))
    coap_decode(b"\x40\x01\x00\x00")  # the codec is the one measured
    result = {
        "devices": args.devices,
        "window": args.window,
        "seconds": args.seconds,
        "runs": args.runs,
        "ingest_events_per_s": ingest,
        "bare_udp_per_s": baseline,
        "ratio": ingest / baseline,
        "machine": platform.machine(),
        "smoke": args.smoke,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"ingest: {ingest:,.0f} CON notifications/s into the core ({args.devices} devices, window {args.window}); "
        f"bare UDP count+ACK {baseline:,.0f}/s; ratio {ingest / baseline:.2f}; median of {args.runs}"
    )


if __name__ == "__main__":
    main()
