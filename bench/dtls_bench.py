"""DTLS cost (issue 13 #1): handshakes per second, and notification ingest over DTLS next to plain CoAP.

The server runs in this process (uvloop, the real `LwM2MServer` and its DTLS listener, OpenSSL from Rust) with the
counting core of `ingest_bench.py`. A second process is the load: it registers `--devices` simulated devices —
over DTLS with a PSK each (TLS_PSK_WITH_AES_128_CCM_8), or over plain CoAP — and then drives confirmable
notifications closed-loop, `--window` in flight per device, each sent when the server's ACK comes back (over
DTLS every notification and every ACK is one record, encrypted by one side and decrypted by the other).
Figures: notifications/s reaching the core (median of `--runs` windows of `--seconds`) for both transports, in
the same run; their ratio (issue 13 target: ≥ 0.5); the server process's CPU per notification (steadier than
the rates when other jobs share the cores); and full PSK handshakes/s (HelloVerifyRequest cookie
exchange included), 16 clients at a time, measured by the load process (client and server cryptography both
run on the machine's cores). The DTLS load sends records sealed before the measurement, as the plain load sends
pre-encoded datagrams, so the ratio is the server's own cost of DTLS (decrypting each notification, encrypting
each ACK); the driver counts the sealed ACK records without opening them, and a device that got no ACK for
REFILL_S sends a new window (a datagram dropped in a socket buffer would otherwise hold its slot for good).
Prints one summary line and writes bench/results/dtls.json.
Reproduce: `python bench/dtls_bench.py --devices 100 --window 8 --seconds 3 --runs 3`. `--smoke`: seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from devicehub._core import coap_encode, coap_encode_uint  # noqa: E402
from devicehub.clock import SystemClock  # noqa: E402
from devicehub.lwm2m import codes  # noqa: E402
from devicehub.lwm2m.coap.endpoint import CoapEndpoint  # noqa: E402
from devicehub.lwm2m.dtls import server_certificate  # noqa: E402
from devicehub.lwm2m.dtls_client import DtlsClient  # noqa: E402
from devicehub.lwm2m.security import ClientCredentials, Keyring  # noqa: E402
from devicehub.lwm2m.server import LwM2MServer  # noqa: E402
from devicehub.sim.device import PELION, SimDevice  # noqa: E402
from ingest_bench import CountingCore, Driver, _windows  # noqa: E402

RESULTS = ROOT / "results" / "dtls.json"
KEY = bytes(range(16))
MAX_RATE = 90_000  # notifications/s the sealed records must last for
REFILL_S = 0.5


def name(n: int) -> str:
    return f"dtls-bench-device-{n:05d}"


class SealedDriver(asyncio.DatagramProtocol):
    """`Driver` over DTLS: its notifications are records of the device's session, sealed before the measurement
    (as the plain driver's are encoded by the Rust codec in a few hundred ns), so the load process stays as lean
    as the plain one and the figure is the server's cost. An ACK is an application-data record (type 23)."""

    def __init__(self, records: list[bytes], server: tuple[str, int], window: int) -> None:
        self.records, self.server, self.window = records, server, window
        self.next = 0
        self.acked_at_check = 0
        self.acks = 0
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def start(self) -> None:
        for _ in range(self.window):
            self.send()
        asyncio.get_running_loop().call_later(REFILL_S, self.refill)

    def refill(self) -> None:
        """A dropped record or ACK would take its window slot for good (the closed loop waits for that ACK): a
        device that got no ACK for REFILL_S sends a new window (records are not resent: DTLS would drop a replay)."""
        if self.acks == self.acked_at_check:
            for _ in range(self.window):
                self.send()
        self.acked_at_check = self.acks
        if self.next < len(self.records):
            asyncio.get_running_loop().call_later(REFILL_S, self.refill)

    def send(self) -> None:
        if self.next < len(self.records):
            self.transport.sendto(self.records[self.next], self.server)
            self.next += 1

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if data[:1] == b"\x17":
            self.acks += 1
            self.send()


def seal(client: DtlsClient, token: bytes, count: int) -> list[bytes]:
    """`count` CON notifications as records of the client's session, in sequence-number order."""
    session = client._session
    assert session is not None
    records = []
    for n in range(1, count + 1):
        records += session.send(
            coap_encode(
                codes.CON,
                codes.CONTENT,
                n & 0xFFFF,
                token,
                [(codes.OBSERVE, coap_encode_uint(n & 0xFFFFFF)), (codes.CONTENT_FORMAT, b"")],
                str(n % 100).encode(),
            )
        )
    return records


async def _handshakes(server: tuple[str, int], count: int, concurrency: int) -> float:
    async def one(n: int) -> None:
        endpoint = CoapEndpoint(SystemClock(), _no_requests)
        credentials = ClientCredentials(psk_identity=name(n), psk_key=KEY)
        client = await DtlsClient.connect("127.0.0.1", SystemClock(), endpoint, server, credentials)
        client.close()

    start = time.perf_counter()
    for first in range(0, count, concurrency):
        await asyncio.gather(*(one(n) for n in range(first, min(first + concurrency, count))))
    return count / (time.perf_counter() - start)


async def _no_requests(*_: Any) -> None:
    return None


async def _generate(
    server: tuple[str, int], secure: bool, devices: int, window: int, seconds: float, handshakes: Any, started: Any
) -> None:
    if secure:
        handshakes.put(await _handshakes(server, handshakes_count(devices), 16))
    drivers: list[Any] = []
    loop = asyncio.get_running_loop()
    per_device = int(MAX_RATE * seconds / devices) + 1
    for n in range(devices):
        security = ClientCredentials(psk_identity=name(n), psk_key=KEY) if secure else None
        sim = SimDevice(SystemClock(), server, name(n), flavor=PELION, security=security)
        await sim.start(lifecycle=False)
        await sim.register()
        if secure:
            client: DtlsClient = sim.endpoint._transport._client  # type: ignore[union-attr]
            records = seal(client, sim._auto_token, per_device)
            udp = client._udp
            assert udp is not None
            sock = udp.get_extra_info("socket").dup()
            udp.close()  # no close_notify: the session lives on in the records
            _, driver = await loop.create_datagram_endpoint(
                lambda records=records: SealedDriver(records, server, window), sock=sock
            )  # type: ignore[misc]
        else:
            sock = sim.endpoint._transport.get_extra_info("socket").dup()  # type: ignore[union-attr]
            sim.endpoint._transport.close()  # type: ignore[union-attr]
            _, driver = await loop.create_datagram_endpoint(
                lambda token=sim._auto_token: Driver(token, server, window), sock=sock
            )  # type: ignore[misc]
        drivers.append(driver)
    for driver in drivers:
        driver.start()
    started.set()  # the measurement starts now: sealing the records took its time before
    await asyncio.sleep(seconds)


def handshakes_count(devices: int) -> int:
    return max(32, devices)


def generator(
    server: tuple[str, int], secure: bool, devices: int, window: int, seconds: float, handshakes: Any, started: Any
) -> None:
    uvloop.run(_generate(server, secure, devices, window, seconds, handshakes, started))


async def measure(
    args: argparse.Namespace, secure: bool, certificate: tuple[bytes, bytes]
) -> tuple[float, float, float]:
    """(notifications/s, PSK handshakes/s, the server process's CPU µs per notification)."""
    core = CountingCore(args.devices)
    server = LwM2MServer(core, SystemClock())
    await server.start("127.0.0.1", 0)
    address = server.address
    if secure:
        await server.start_secure("127.0.0.1", 0, certificate, max_handshakes=1024)
        assert server.dtls is not None
        count = max(handshakes_count(args.devices), args.devices)
        server.dtls.load(Keyring(psks={name(n): (KEY, "a" * 32) for n in range(count)}))
        address = server.dtls.address
    context = multiprocessing.get_context("spawn")
    handshakes, started = context.Queue(), context.Event()
    proc = context.Process(
        target=generator,
        args=(address, secure, args.devices, args.window, args.runs * args.seconds + 3, handshakes, started),
    )
    proc.start()
    try:
        await asyncio.wait_for(core.all_registered.wait(), 120)
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 60)
        cpu, events = time.process_time(), core.events
        rate = statistics.median(await _windows(core, args.runs, args.seconds))
        cpu_us = (time.process_time() - cpu) / max(core.events - events, 1) * 1e6
        return rate, (handshakes.get(timeout=10) if secure else 0.0), cpu_us
    finally:
        proc.terminate()
        proc.join()
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--window", type=int, default=8, help="notifications in flight per device")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.seconds, args.runs = 10, 0.5, 1
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        certificate = server_certificate(Path(tmp) / "c.pem", Path(tmp) / "c.key", create=True)
    plain, _, plain_cpu = uvloop.run(measure(args, False, certificate))
    secure, handshakes, secure_cpu = uvloop.run(measure(args, True, certificate))
    result = {
        "devices": args.devices,
        "window": args.window,
        "seconds": args.seconds,
        "runs": args.runs,
        "plain_notifications_per_s": plain,
        "dtls_notifications_per_s": secure,
        "ratio": secure / plain,
        "psk_handshakes_per_s": handshakes,
        "plain_server_cpu_us": plain_cpu,
        "dtls_server_cpu_us": secure_cpu,
        "suite": "TLS_PSK_WITH_AES_128_CCM_8",
        "machine": platform.machine(),
        "smoke": args.smoke,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"dtls: {secure:,.0f} CON notifications/s over DTLS vs {plain:,.0f}/s plain CoAP: ratio {secure / plain:.2f} "
        f"({args.devices} devices, window {args.window}); {handshakes:,.0f} PSK handshakes/s; median of {args.runs}; "
        f"server CPU per notification {secure_cpu:.1f} µs DTLS, {plain_cpu:.1f} µs plain"
    )


if __name__ == "__main__":
    main()
