"""DTLS availability (issue 28 #3, #4): full PSK handshakes/s, the server's memory per idle session, and how often a
legitimate device's handshake succeeds while one address floods the listener with half-open handshakes.

The server is its own process (uvloop, the real `DtlsListener` with its default bounds, a keyring of one PSK per
device), so its RSS is the listener's alone; this process is the load (OpenSSL clients as the simulator's, one UDP
socket each; python-mbedtls ones until issue 29 #7).
1. `--sessions` devices, each its own identity, handshake (16 at a time, HelloVerifyRequest cookie exchange
   included) and go quiet without a close_notify: their sessions stay open and idle on the server. Figures: full
   handshakes/s (client and server cryptography share the machine's cores), the server process's CPU per handshake
   (steadier than the rate when other jobs share the cores) and its RSS growth divided by the sessions open (RSS
   after minus RSS before, with the keyring loaded and one handshake done before).
2. A flood process (`tests/support/dtls_flood.py`) collects the cookies of `--flood-ports` ports of 127.0.3.1 and
   sends ClientHellos echoing them round robin, `--flood-rate` a second (RFC 6347 §4.2.1: hellos a server must keep
   a handshake for; more ports than 4cebb5c's 256 slots). Meanwhile a device on 127.0.0.1 handshakes `--tries`
   times in a row; a try succeeds when its handshake is over within TRY_S, its hellos sent again after 1 s without an
   answer as a DTLS client's retransmission timer does (RFC 6347 §4.2.4.1). Figure: successes / tries, and the
   median time of a successful try.
Run against another checkout's code by its PYTHONPATH (the server process imports `devicehub` from there); the
server process is given no setting 4cebb5c lacks. Prints one summary line and writes bench/results/dtls_limits.json.
Reproduce: `python bench/dtls_limits_bench.py --sessions 5000 --tries 100`. `--smoke`: seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import multiprocessing
import platform
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import uvloop

from devicehub._core import DtlsConnector
from devicehub.lwm2m.security import ClientCredentials

ROOT = Path(__file__).resolve().parent
TESTS = ROOT.parent / "tests"
RESULTS = ROOT / "results" / "dtls_limits.json"
KEY = bytes(range(16))
CONCURRENCY = 16
TRY_S = 5.0
RETRANSMIT_S = 1.0
CONNECTOR = DtlsConnector()  # every device's sessions: each brings its own PSK
FLOODER = "127.0.3.1"  # another /24 than the devices' 127.0.0.1 (Linux routes all of 127/8 to lo)


def name(n: int) -> str:
    return f"dtls-limits-device-{n:05d}"


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _serve(devices: int, conn: Connection) -> None:
    from devicehub.clock import SystemClock
    from devicehub.lwm2m.coap.endpoint import CoapEndpoint
    from devicehub.lwm2m.dtls import DtlsListener, server_certificate
    from devicehub.lwm2m.security import Keyring

    async def nothing(*_: Any) -> None:
        return None

    clock = SystemClock()
    folder = Path(tempfile.mkdtemp())
    certificate = server_certificate(folder / "c.pem", folder / "c.key", create=True)
    listener = await DtlsListener.bind("127.0.0.1", 0, clock, CoapEndpoint(clock, nothing), certificate=certificate)
    listener.load(Keyring(psks={name(n): (KEY, "a" * 32) for n in range(devices)}))
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def answer() -> None:
        request = conn.recv()
        if request == "stop":
            done.set_result(None)
            return
        conn.send(
            {
                "rss_kib": _rss_kib(),
                "cpu_s": time.process_time(),
                "sessions": listener.session_count(),
                "stats": dataclasses.asdict(listener.stats),
            }
        )

    loop.add_reader(conn.fileno(), answer)
    conn.send(listener.address)
    await done
    await listener.close()


def serve(devices: int, conn: Connection) -> None:
    logging.disable(logging.WARNING)  # one line per flood handshake timed out or refused: not the figure
    uvloop.run(_serve(devices, conn))


class Device(asyncio.DatagramProtocol):
    """One client on its own socket (the OpenSSL engine in connect state, as the simulator's): full PSK handshakes,
    its last flight sent again when the retransmission timer runs out (1 s at first, RFC 6347 §4.2.4)."""

    def __init__(self, identity: str) -> None:
        self.credential = ClientCredentials(psk_identity=identity, psk_key=KEY).engine_options()
        self.session: Any = None
        self.transport: Any = None
        self.server: tuple[str, int] = ("", 0)
        self.progress = asyncio.Event()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if self.session is not None:
            self.send(self.session.feed(data)[1])
            self.progress.set()

    def send(self, datagrams: list[bytes]) -> None:
        for datagram in datagrams:
            self.transport.sendto(datagram, self.server)

    async def handshake(self, server: tuple[str, int], within: float) -> bool:
        self.server = server
        self.session, hello = CONNECTOR.connect(**self.credential)
        self.send(hello)
        loop = asyncio.get_running_loop()
        end = loop.time() + within
        while not self.session.established:
            self.progress.clear()
            left = end - loop.time()
            if left <= 0 or self.session.failure is not None:
                return False
            try:
                await asyncio.wait_for(self.progress.wait(), min(RETRANSMIT_S, left))
            except TimeoutError:
                self.send(self.session.handle_timeout())  # the retransmission timer ran out: the last flight again
        return True


async def device(host: str, identity: str) -> Device:
    _, protocol = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: Device(identity), local_addr=(host, 0)
    )
    return protocol


async def open_sessions(server: tuple[str, int], first: int, count: int) -> tuple[float, int, list[Device]]:
    """`count` devices handshake, CONCURRENCY at a time, and go quiet: no close_notify, their sessions stay open and
    idle on the server; (handshakes/s, failures, the devices: close them once measured, as a port closed and bound
    again by the next device would replace its session)."""
    queue = iter(range(first, first + count))
    failures, devices = 0, []

    async def worker() -> None:
        nonlocal failures
        for n in queue:
            client = await device("127.0.0.1", name(n))
            devices.append(client)
            if not await client.handshake(server, TRY_S):
                failures += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return count / (time.perf_counter() - start), failures, devices


async def tries_during_flood(server: tuple[str, int], identity: str, tries: int) -> tuple[int, list[float]]:
    """A device handshakes `tries` times in a row; (successes, seconds of each success)."""
    successes, times = 0, []
    for _ in range(tries):
        client = await device("127.0.0.1", identity)
        start = time.perf_counter()
        if await client.handshake(server, TRY_S):
            successes += 1
            times.append(time.perf_counter() - start)
        client.transport.close()
    return successes, times


def ask(conn: Connection) -> dict[str, Any]:
    conn.send("report")
    reply: dict[str, Any] = conn.recv()
    return reply


async def run(args: argparse.Namespace, conn: Connection, server: tuple[str, int]) -> dict[str, Any]:
    _, _, first = await open_sessions(server, 0, 1)  # one-off allocations (OpenSSL's tables, the cache) first
    before = ask(conn)
    rate, failures, devices = await open_sessions(server, 1, args.sessions)
    after = ask(conn)
    for each in first + devices:
        each.transport.close()
    opened = after["sessions"] - before["sessions"]
    per_session = (after["rss_kib"] - before["rss_kib"]) * 1024 / max(opened, 1)
    cpu_us = (after["cpu_s"] - before["cpu_s"]) * 1e6 / max(opened, 1)
    flood = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "support.dtls_flood", *map(str, server), FLOODER, "--ports", str(args.flood_ports),
        "--rate", str(args.flood_rate), cwd=TESTS, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert flood.stdout is not None
        held = int((await flood.stdout.readline()).split()[1])
        await asyncio.sleep(1.0)  # the flood running a second before the device starts (its load, not a wait on it)
        flood_start = ask(conn)
        successes, times = await tries_during_flood(server, name(args.sessions + 1), args.tries)
        flood_end = ask(conn)
    finally:
        flood.kill()
        await flood.wait()
    events = {
        key: flood_end["stats"][key] - flood_start["stats"].get(key, 0)
        for key in flood_end["stats"]
        if flood_end["stats"][key] != flood_start["stats"].get(key, 0)
    }
    return {
        "psk_handshakes_per_s": rate,
        "server_cpu_us_per_handshake": cpu_us,
        "handshake_failures": failures,
        "idle_sessions": opened,
        "rss_bytes_per_idle_session": per_session,
        "flood_ports_with_cookie": held,
        "flood_rate": args.flood_rate,
        "legit_tries": args.tries,
        "legit_successes": successes,
        "legit_success_ratio": successes / args.tries,
        "legit_median_s": statistics.median(times) if times else None,
        "listener_events_during_flood": events,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=5000, help="idle sessions opened")
    parser.add_argument("--tries", type=int, default=100, help="legitimate handshakes during the flood")
    parser.add_argument("--flood-ports", type=int, default=300)
    parser.add_argument("--flood-rate", type=float, default=1000.0, help="ClientHellos a second")
    parser.add_argument("--label", default="", help="a name for the code measured (e.g. main), in the JSON")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.sessions, args.tries = 300, 10
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    server_process = context.Process(target=serve, args=(args.sessions + 2, theirs), daemon=True)
    server_process.start()
    try:
        server = ours.recv()
        figures = uvloop.run(run(args, ours, server))
        ours.send("stop")
    finally:
        server_process.join(5)
        if server_process.is_alive():
            server_process.kill()
    result = {
        "benchmark": "dtls_limits",
        "code": args.label or "this checkout",
        "smoke": args.smoke,
        "sessions": args.sessions,
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
        **figures,
    }
    if not args.smoke:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    median = figures["legit_median_s"]
    print(
        f"dtls_limits: {figures['psk_handshakes_per_s']:,.0f} PSK handshakes/s "
        f"({figures['server_cpu_us_per_handshake']:.0f} µs server CPU each); "
        f"{figures['rss_bytes_per_idle_session'] / 1024:.1f} KiB RSS per idle session ({figures['idle_sessions']}); "
        f"legitimate handshakes during a {args.flood_rate:,.0f} hellos/s one-address flood: "
        f"{figures['legit_successes']}/{args.tries} "
        f"(median {'-' if median is None else f'{median * 1000:.0f} ms'})"
    )


if __name__ == "__main__":
    main()
