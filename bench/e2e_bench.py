"""End-to-end throughput and latency: devices → LwM2M server → core → channel queue → application.

Starts `devicehub serve` (embedded store) as its own process and an application in this process with either a
WebSocket channel or an HTTP callback receiver (`--channel websocket|callback`); a presubscription on `/3/0/9`
routes the devices' values to it. A load process registers `--devices` Pelion-flavoured devices (real UDP, each
with the auto-observed resource `/3/0/9`) and then sends confirmable notifications paced to `--rate` events/s in
total (at most `--window` unacknowledged per device); each payload is the send time, so the application measures
device-to-application latency on the one machine clock.
Reports delivered events/s (median of `--runs` windows of `--seconds`), p50/p99 latency, and the ratio of
delivered to offered events.
Same-run baseline (issue 15): before devicehub, the same generator drives a bare relay, a process on the same stack
(uvloop, aiohttp, the service's receive buffer) that forwards each datagram unparsed as one WebSocket binary frame
to the same application client and ACKs a CON datagram with a fixed 4-byte empty ACK built from its header. For
both, CPU per event is read from /proc/<pid>/stat (utime + stime of every thread of the process, so independent of
the machine's other load) over the measurement windows, and the bench prints the ratio of devicehub's events per
CPU-second to the relay's (`--no-relay` skips the baseline). Prints one summary line and writes
bench/results/e2e-<channel>.json. `--smoke` runs a few seconds.
Reproduce: `python bench/e2e_bench.py --channel websocket --devices 200 --rate 30000 --seconds 5 --runs 3 --non`.
`--trusted` (issue 34) measures the same load twice, each on a fresh one-node service: the channel without and then
with cursors (`include_cursor`) and, for a callback, Standard Webhooks signatures; it prints the on/off ratios and
writes bench/results/e2e-<channel>-trusted.json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from devicehub._core import coap_encode, coap_encode_uint  # noqa: E402
from devicehub.clock import SystemClock  # noqa: E402
from devicehub.lwm2m import codes  # noqa: E402
from devicehub.lwm2m.udp import widen_receive_buffer  # noqa: E402
from devicehub.sim.device import PELION, SimDevice  # noqa: E402
from support.ports import free_tcp_port, free_udp_port  # noqa: E402
from support.redis_server import redis_server  # noqa: E402
from support.service import ServiceProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TICK = 0.01


LOST_AFTER = 2.0  # RFC 7252 ACK_TIMEOUT: an unacknowledged CON older than this leaves the window as lost


class Pump(asyncio.DatagramProtocol):
    """One device's auto-observe notifications; tracks what is in flight so the pacer respects the window.

    A CON notification whose ACK never comes (a datagram dropped by a full receive buffer under overload) leaves
    the window after LOST_AFTER, as a device's retransmission would: otherwise every drop shrinks the window for
    good and an overloaded run collapses to a trickle."""

    def __init__(self, token: bytes, server: tuple[str, int], confirmable: bool) -> None:
        self.token, self.server, self.confirmable = token, server, confirmable
        self.seq = self.mid = 0
        self.unacked: dict[int, float] = {}  # message ID → send time, oldest first
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def has_room(self, window: int, now: float) -> bool:
        while len(self.unacked) >= window:
            oldest = next(iter(self.unacked))
            if now - self.unacked[oldest] < LOST_AFTER:
                return False
            del self.unacked[oldest]
        return True

    def send(self, now: float) -> None:
        self.seq = (self.seq + 1) & 0xFFFFFF
        self.mid = (self.mid + 1) & 0xFFFF
        if self.confirmable:  # a NON notification has no ACK to wait for
            self.unacked[self.mid] = now
        payload = f"{time.time():.6f}".encode()
        options = [(codes.OBSERVE, coap_encode_uint(self.seq)), (codes.CONTENT_FORMAT, b"")]
        self.transport.sendto(
            coap_encode(
                codes.CON if self.confirmable else codes.NON, codes.CONTENT, self.mid, self.token, options, payload
            ),
            self.server,
        )

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if len(data) >= 4 and data[0] >> 4 & 3 == codes.ACK:
            self.unacked.pop(int.from_bytes(data[2:4], "big"), None)


async def _load(
    server: tuple[str, int], devices: int, rate: float, window: int, seconds: float, confirmable: bool, register: bool
) -> None:
    loop = asyncio.get_running_loop()
    pumps: list[Pump] = []
    for n in range(devices):
        if not register:  # the relay knows no registrations: a socket and a token per device are enough
            token = n.to_bytes(8, "big")
            _, pump = await loop.create_datagram_endpoint(
                lambda t=token: Pump(t, server, confirmable),  # type: ignore[misc]
                local_addr=("127.0.0.1", 0),
            )
            pumps.append(pump)
            continue
        sim = SimDevice(SystemClock(), server, f"bench-{n}", flavor=PELION)
        await sim.start(lifecycle=False)
        await sim.register()
        sock = sim.endpoint._transport.get_extra_info("socket").dup()  # keep the registered source address
        sim.endpoint._transport.close()
        _, pump = await loop.create_datagram_endpoint(lambda t=sim._auto_token: Pump(t, server, confirmable), sock=sock)  # type: ignore[misc]
        pumps.append(pump)
    owed = 0.0
    last = loop.time()
    end = last + seconds
    turn = 0
    while last < end:
        now = loop.time()
        owed += rate * (now - last)  # by elapsed time: a sleep of TICK can last longer than TICK
        last = now
        while owed >= 1:
            for _ in range(len(pumps)):  # next device with room in its window
                pump = pumps[turn % len(pumps)]
                turn += 1
                if pump.has_room(window, now):
                    pump.send(now)
                    break
            else:  # every window is full: what is owed now is not offered (a scan per unit would starve the loop)
                owed = 0
                break
            owed -= 1
        await asyncio.sleep(TICK)


def load_process(
    server: tuple[str, int],
    devices: int,
    rate: float,
    window: int,
    seconds: float,
    confirmable: bool,
    register: bool = True,
) -> None:
    uvloop.run(_load(server, devices, rate, window, seconds, confirmable, register))


class Relay(asyncio.DatagramProtocol):
    """The baseline: each datagram out unparsed as one binary frame to every connected WebSocket; a CON one
    ACKed with the empty ACK of its message ID (0x60 0x00 + the received header's two message-ID bytes)."""

    def __init__(self) -> None:
        self.sockets: set[web.WebSocketResponse] = set()
        self.pending: list[bytes] = []
        self.wake = asyncio.Event()
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if len(data) >= 4 and data[0] & 0x30 == 0:  # type CON
            self.transport.sendto(bytes((0x60, 0, data[2], data[3])), addr)
        self.pending.append(data)
        self.wake.set()

    async def forward(self) -> None:
        """One writer for every frame: awaiting a send that does not block costs no task per datagram."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            batch, self.pending = self.pending, []
            for ws in list(self.sockets):
                for data in batch:
                    await ws.send_bytes(data)


async def _relay(coap_port: int, http_port: int) -> None:
    loop = asyncio.get_running_loop()
    transport, relay = await loop.create_datagram_endpoint(Relay, local_addr=("127.0.0.1", coap_port))
    # the service's listener asks for this buffer too: with the default 208 KiB the relay lost about a quarter of
    # the datagrams offered at 30 000/s and was measured on what was left
    widen_receive_buffer(transport.get_extra_info("socket"))

    async def connect(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        relay.sockets.add(ws)
        try:
            async for _ in ws:
                pass
        finally:
            relay.sockets.discard(ws)
        return ws

    app = web.Application()
    app.router.add_get("/relay", connect)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", http_port).start()
    await relay.forward()


def relay_process(coap_port: int, http_port: int) -> None:
    uvloop.run(_relay(coap_port, http_port))


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes (all their threads) so far, from /proc/<pid>/stat (Linux)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted after the comm
    return total / os.sysconf("SC_CLK_TCK")


class Collector:
    """Counts notifications and their latencies inside measurement windows."""

    def __init__(self, expected_devices: int) -> None:
        self.count = 0
        self.messages = 0  # WebSocket frames / callback bodies that carried them
        self.latencies: list[float] = []
        self.measuring = False
        self.started = time.time()
        # per whole second since measuring began: events received and their latencies (for bench/plot.py)
        self.seconds: dict[int, list[float]] = {}

    def take(self, message: dict[str, Any]) -> None:
        now = time.time()
        notes = message.get("notifications", [])
        if not self.measuring:
            return
        self.count += len(notes)
        self.messages += 1
        second = self.seconds.setdefault(int(now - self.started), [])
        for note in notes:
            try:
                latency = now - float(base64.b64decode(note["payload"]))
            except ValueError:
                continue
            self.latencies.append(latency)
            second.append(latency)

    def take_datagram(self, data: bytes) -> None:
        """One relayed datagram: its payload (after the 0xFF marker; the send time is digits) is the send time."""
        if not self.measuring:
            return
        self.count += 1
        self.messages += 1
        try:
            latency = time.time() - float(data[data.rindex(b"\xff") + 1 :])
        except ValueError:
            return
        self.latencies.append(latency)
        self.seconds.setdefault(int(time.time() - self.started), []).append(latency)

    def timeline(self) -> list[dict[str, float]]:
        """Events/s and latency percentiles for each second of the measurement windows."""
        points = []
        for second, latencies in sorted(self.seconds.items())[:-1]:  # the last second is cut short
            if not latencies:  # a second of messages without notifications
                continue
            cuts = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [latencies[0]] * 99
            points.append({"t": second, "events": len(latencies), "p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000})
        return points


async def _received(http: aiohttp.ClientSession, devices_url: str) -> float:
    """Datagrams the devices' node has received on its CoAP endpoint (its /metrics)."""
    async with http.get(f"{devices_url}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith('devicehub_coap_datagrams_total{direction="in"} '):
                return float(line.split()[-1])
    return 0.0


class Windows:
    """What the measurement windows saw: delivered events/s, datagrams/s in, CPU µs per delivered event."""

    def __init__(self) -> None:
        self.rates: list[float] = []
        self.ingested: list[float] = []
        self.cpu_us: list[float] = []
        self.per_message = 0.0  # events per WebSocket frame / callback body, over the measurement windows


async def _windows(
    collector: Collector,
    args: argparse.Namespace,
    pids: list[int],
    http: aiohttp.ClientSession | None = None,
    devices_url: str = "",
) -> Windows:
    await asyncio.sleep(args.warmup)
    seen = Windows()
    collector.started = time.time()
    for _ in range(args.runs):
        collector.count, collector.measuring = 0, True
        before = await _received(http, devices_url) if http is not None else 0.0
        cpu, start = cpu_seconds(pids), time.perf_counter()
        await asyncio.sleep(args.seconds)
        elapsed, cpu = time.perf_counter() - start, cpu_seconds(pids) - cpu
        collector.measuring = False
        seen.rates.append(collector.count / elapsed)
        seen.cpu_us.append(cpu / max(collector.count, 1) * 1e6)
        if http is not None:
            seen.ingested.append((await _received(http, devices_url) - before) / elapsed)
    return seen


def _load_process(args: argparse.Namespace, coap_port: int, register: bool) -> Any:
    return multiprocessing.get_context("spawn").Process(
        target=load_process,
        args=(
            ("127.0.0.1", coap_port),
            args.devices,
            args.rate,
            args.window,
            args.warmup + args.runs * args.seconds + 30,
            not args.non,
            register,
        ),
    )


async def _measure_relay(args: argparse.Namespace) -> tuple[Windows, list[float]]:
    """The bare relay under the same generator, read by the same kind of client (aiohttp WebSocket)."""
    coap_port, http_port = free_udp_port(), free_tcp_port()
    relay = multiprocessing.get_context("spawn").Process(target=relay_process, args=(coap_port, http_port))
    relay.start()
    collector = Collector(args.devices)
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(200):
                try:
                    ws = await http.ws_connect(f"http://127.0.0.1:{http_port}/relay")
                    break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            else:
                raise RuntimeError("the relay did not start")

            async def read() -> None:
                async for frame in ws:
                    collector.take_datagram(frame.data)

            reader = asyncio.create_task(read())
            load = _load_process(args, coap_port, register=False)
            load.start()
            try:
                assert relay.pid is not None
                seen = await _windows(collector, args, [relay.pid])
            finally:
                load.terminate()
                load.join()
                await ws.close()
                reader.cancel()
    finally:
        relay.terminate()
        relay.join()
    return seen, collector.latencies


async def _measure(
    service: ServiceProcess, devices_node: ServiceProcess, args: argparse.Namespace, trusted: bool = False
) -> tuple[Windows, list[float], list[dict[str, float]]]:
    """`service` holds the application's channel; the devices talk to `devices_node` (the same one, or
    another node of the cluster in `--redis` mode)."""
    headers = {"Authorization": f"Bearer {service.api_key}"}
    collector = Collector(args.devices)
    cfg: dict[str, Any] = {"include_timestamp": True, **({"include_cursor": True} if trusted else {})}
    serialization: dict[str, Any] = {"serialization": {"type": "v2", "max_chunk_size": 10000, "cfg": cfg}}
    if trusted:  # issue 34: cursors and per-device sequences, and (callback) Standard Webhooks signatures
        serialization["secret"] = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    receiver: web.AppRunner | None = None
    async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
        async with http.put("/v2/subscriptions", json=[{"resource-path": ["/3/0/9"]}]) as r:
            assert r.status == 202, r.status
        if args.channel == "websocket":
            socket_body = {"serialization": serialization["serialization"]}
            async with http.put("/v2/notification/websocket", json=socket_body) as r:
                assert r.status in (200, 201), await r.text()
            ws = await http.ws_connect("/v2/notification/websocket-connect")

            async def read() -> None:
                async for frame in ws:
                    collector.take(json.loads(frame.data))

            reader = asyncio.create_task(read())
        else:

            async def receive(request: web.Request) -> web.Response:
                collector.take(json.loads(await request.read() or b"{}"))
                return web.Response(status=200)  # verification needs 200; deliveries take 200 or 204

            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_put("/callback", receive)
            receiver = web.AppRunner(app, access_log=None)
            await receiver.setup()
            port = free_tcp_port()
            await web.TCPSite(receiver, "127.0.0.1", port).start()
            body = {"url": f"http://127.0.0.1:{port}/callback", **serialization}
            async with http.put("/v2/notification/callback", json=body) as r:
                assert r.status == 204, await r.text()
        load = _load_process(args, devices_node.coap_port, register=True)
        load.start()
        pids = sorted({p.process.pid for p in (service, devices_node) if p.process is not None})
        try:
            seen = await _windows(collector, args, pids, http, devices_node.base_url)
        finally:
            load.terminate()
            load.join()
            if args.channel == "websocket":
                await ws.close()
                reader.cancel()
            if receiver is not None:
                await receiver.cleanup()
    seen.per_message = collector.count / collector.messages if collector.messages else 0.0
    return seen, collector.latencies, collector.timeline()


def _p50_p99(latencies: list[float]) -> tuple[float, float]:
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
    return quantiles[49] * 1000, quantiles[98] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--channel", choices=("websocket", "callback"), default="websocket")
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20_000.0, help="offered notifications per second in total")
    parser.add_argument("--window", type=int, default=16, help="unacknowledged notifications per device")
    parser.add_argument(
        "--non", action="store_true", help="non-confirmable notifications (as Wakaama/Anjay send) instead of CON"
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=5.0, help="registration and ramp-up before measuring")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--redis", action="store_true", help="two nodes on one redis-server: devices on node A, the channel on B"
    )
    parser.add_argument("--no-relay", action="store_true", help="skip the bare relay baseline")
    parser.add_argument(
        "--trusted",
        action="store_true",
        help="issue 34: the same load with cursors and (callback) signatures off, then on, one node each; the ratio",
    )
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.rate, args.seconds, args.warmup, args.runs = 5, 200.0, 1.0, 2.0, 1
    if args.trusted:
        _trusted(args)
        return
    relay: Windows | None = None
    if not args.no_relay:
        relay, relay_latencies = uvloop.run(_measure_relay(args))
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if args.redis:
            url = stack.enter_context(redis_server())
            node_a = ServiceProcess(data_dir=Path(tmp) / "a", extra_args=("--redis-url", url)).start()
            stack.callback(node_a.stop)
            (Path(tmp) / "b").mkdir()
            (Path(tmp) / "b" / "dev-api-key").write_text(node_a.api_key + "\n")
            node_b = ServiceProcess(data_dir=Path(tmp) / "b", extra_args=("--redis-url", url)).start()
            stack.callback(node_b.stop)
            seen, latencies, timeline = uvloop.run(_measure(node_b, node_a, args))
        else:
            service = ServiceProcess(data_dir=Path(tmp) / "data").start()
            stack.callback(service.stop)
            seen, latencies, timeline = uvloop.run(_measure(service, service, args))
    delivered = statistics.median(seen.rates)
    p50, p99 = _p50_p99(latencies)
    cpu_us = statistics.median(seen.cpu_us)
    baseline: dict[str, Any] | None = None
    if relay is not None:
        relay_p50, relay_p99 = _p50_p99(relay_latencies)
        relay_cpu_us = statistics.median(relay.cpu_us)
        baseline = {
            "delivered_per_s": relay.rates,
            "median": statistics.median(relay.rates),
            "cpu_us_per_event": relay.cpu_us,
            "cpu_us_per_event_median": relay_cpu_us,
            "latency_p50_ms": relay_p50,
            "latency_p99_ms": relay_p99,
        }
    # events per CPU-second, devicehub's over the relay's: the relay's CPU per event over devicehub's
    cpu_ratio = baseline["cpu_us_per_event_median"] / cpu_us if baseline is not None else None
    result = {
        "channel": args.channel,
        "mode": "redis, two nodes" if args.redis else "embedded, one node",
        "devices": args.devices,
        "offered_per_s": args.rate,
        "window": args.window,
        "confirmable": not args.non,
        "delivered_per_s": seen.rates,
        "datagrams_in_per_s": seen.ingested,
        "median": delivered,
        "ratio": delivered / args.rate,
        "cpu_us_per_event": seen.cpu_us,
        "cpu_us_per_event_median": cpu_us,
        "relay": baseline,
        "events_per_cpu_second_ratio": cpu_ratio,
        "latency_p50_ms": p50,
        "latency_p99_ms": p99,
        "events_per_message": seen.per_message,
        "machine": platform.machine(),
        "smoke": args.smoke,
        "timeline": timeline,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"e2e-{args.channel}{'-redis' if args.redis else ''}.json").write_text(
        json.dumps(result, indent=2) + "\n"
    )
    print(
        f"e2e {args.channel}{' (redis, 2 nodes)' if args.redis else ''}: {delivered:,.0f} notifications/s "
        f"delivered (median of {args.runs}), offered "
        f"{args.rate:,.0f}/s (service received {statistics.median(seen.ingested):,.0f} datagrams/s), ratio "
        f"{delivered / args.rate:.2f}; latency p50 {p50:.1f} ms p99 {p99:.1f} ms; {cpu_us:.1f} µs CPU per event, "
        f"{seen.per_message:.1f} events per {'frame' if args.channel == 'websocket' else 'body'}"
        + (
            f"; bare relay {baseline['median']:,.0f}/s at {baseline['cpu_us_per_event_median']:.1f} µs CPU per "
            f"event: events per CPU-second {cpu_ratio:.2f} of the relay's"
            if baseline is not None
            else ""
        )
    )


def _trusted(args: argparse.Namespace) -> None:
    """issue 34: delivered events/s, latency and CPU per event with cursors and signatures off, then on, each on a
    fresh one-node service under the same load, in this run; the on/off ratios."""
    figures: dict[str, dict[str, Any]] = {}
    for mode in ("off", "on"):
        with tempfile.TemporaryDirectory() as tmp:
            service = ServiceProcess(data_dir=Path(tmp) / "data").start()
            try:
                seen, latencies, _ = uvloop.run(_measure(service, service, args, trusted=mode == "on"))
            finally:
                service.stop()
        p50, p99 = _p50_p99(latencies)
        figures[mode] = {
            "delivered_per_s": seen.rates,
            "median": statistics.median(seen.rates),
            "cpu_us_per_event_median": statistics.median(seen.cpu_us),
            "latency_p50_ms": p50,
            "latency_p99_ms": p99,
        }
    off, on = figures["off"], figures["on"]
    result = {
        "channel": args.channel,
        "devices": args.devices,
        "offered_per_s": args.rate,
        "confirmable": not args.non,
        "off": off,
        "on": on,
        "throughput_ratio": on["median"] / off["median"] if off["median"] else None,
        "cpu_ratio": off["cpu_us_per_event_median"] / on["cpu_us_per_event_median"],
        "smoke": args.smoke,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"e2e-{args.channel}-trusted.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"e2e {args.channel}, cursors{' and signatures' if args.channel == 'callback' else ''} on vs off: "
        f"{on['median']:,.0f} vs {off['median']:,.0f} notifications/s delivered (ratio "
        f"{result['throughput_ratio'] or 0:.2f}), p99 {on['latency_p99_ms']:.1f} vs {off['latency_p99_ms']:.1f} ms, "
        f"{on['cpu_us_per_event_median']:.1f} vs {off['cpu_us_per_event_median']:.1f} µs CPU per event "
        f"(events per CPU-second ratio {result['cpu_ratio']:.2f})"
    )


if __name__ == "__main__":
    main()
