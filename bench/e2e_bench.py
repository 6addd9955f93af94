"""End-to-end throughput and latency: devices → LwM2M server → core → channel queue → application.

Starts `devicehub serve` (embedded store) as its own process and an application in this process with either a
WebSocket channel or an HTTP callback receiver (`--channel websocket|callback`); a presubscription on `/3/0/9`
routes the devices' values to it. A load process registers `--devices` Pelion-flavoured devices (real UDP, each
with the auto-observed resource `/3/0/9`) and then sends confirmable notifications paced to `--rate` events/s in
total (at most `--window` unacknowledged per device); each payload is the send time, so the application measures
device-to-application latency on the one machine clock.
Reports delivered events/s (median of `--runs` windows of `--seconds`), p50/p99 latency, and the ratio of
delivered to offered events (the baseline measured in the same run). Prints one summary line and writes
bench/results/e2e-<channel>.json. `--smoke` runs a few seconds.
Reproduce: `python bench/e2e_bench.py --channel websocket --devices 200 --rate 20000 --seconds 5 --runs 3`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import multiprocessing
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
from devicehub.sim.device import PELION, SimDevice  # noqa: E402
from support.ports import free_tcp_port  # noqa: E402
from support.redis_server import redis_server  # noqa: E402
from support.service import ServiceProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TICK = 0.01


class Pump(asyncio.DatagramProtocol):
    """One device's auto-observe notifications; counts what is in flight so the pacer respects the window."""

    def __init__(self, token: bytes, server: tuple[str, int], confirmable: bool) -> None:
        self.token, self.server, self.confirmable = token, server, confirmable
        self.seq = self.mid = self.in_flight = 0
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def send(self) -> None:
        self.seq = (self.seq + 1) & 0xFFFFFF
        self.mid = (self.mid + 1) & 0xFFFF
        self.in_flight += self.confirmable  # a NON notification has no ACK to wait for
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
            self.in_flight = max(self.in_flight - 1, 0)


async def _load(
    server: tuple[str, int], devices: int, rate: float, window: int, seconds: float, confirmable: bool
) -> None:
    loop = asyncio.get_running_loop()
    pumps: list[Pump] = []
    for n in range(devices):
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
                if pump.in_flight < window:
                    pump.send()
                    break
            owed -= 1
        await asyncio.sleep(TICK)


def load_process(
    server: tuple[str, int], devices: int, rate: float, window: int, seconds: float, confirmable: bool
) -> None:
    uvloop.run(_load(server, devices, rate, window, seconds, confirmable))


class Collector:
    """Counts notifications and their latencies inside measurement windows."""

    def __init__(self, expected_devices: int) -> None:
        self.count = 0
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
        second = self.seconds.setdefault(int(now - self.started), [])
        for note in notes:
            try:
                latency = now - float(base64.b64decode(note["payload"]))
            except ValueError:
                continue
            self.latencies.append(latency)
            second.append(latency)

    def timeline(self) -> list[dict[str, float]]:
        """Events/s and latency percentiles for each second of the measurement windows."""
        points = []
        for second, latencies in sorted(self.seconds.items())[:-1]:  # the last second is cut short
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


async def _windows(
    collector: Collector, args: argparse.Namespace, http: aiohttp.ClientSession, devices_url: str
) -> tuple[list[float], list[float]]:
    await asyncio.sleep(args.warmup)
    rates, ingested = [], []
    collector.started = time.time()
    for _ in range(args.runs):
        collector.count, collector.measuring = 0, True
        before, start = await _received(http, devices_url), time.perf_counter()
        await asyncio.sleep(args.seconds)
        elapsed = time.perf_counter() - start
        rates.append(collector.count / elapsed)
        ingested.append((await _received(http, devices_url) - before) / elapsed)
        collector.measuring = False
    return rates, ingested


async def _measure(
    service: ServiceProcess, devices_node: ServiceProcess, args: argparse.Namespace
) -> tuple[list[float], list[float], list[float], list[dict[str, float]]]:
    """`service` holds the application's channel; the devices talk to `devices_node` (the same one, or
    another node of the cluster in `--redis` mode)."""
    headers = {"Authorization": f"Bearer {service.api_key}"}
    collector = Collector(args.devices)
    serialization = {"serialization": {"type": "v2", "max_chunk_size": 10000, "cfg": {"include_timestamp": True}}}
    receiver: web.AppRunner | None = None
    async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
        async with http.put("/v2/subscriptions", json=[{"resource-path": ["/3/0/9"]}]) as r:
            assert r.status == 202, r.status
        if args.channel == "websocket":
            async with http.put("/v2/notification/websocket", json=serialization) as r:
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
        load = multiprocessing.get_context("spawn").Process(
            target=load_process,
            args=(
                ("127.0.0.1", devices_node.coap_port),
                args.devices,
                args.rate,
                args.window,
                args.warmup + args.runs * args.seconds + 30,
                not args.non,
            ),
        )
        load.start()
        try:
            rates, ingested = await _windows(collector, args, http, devices_node.base_url)
        finally:
            load.terminate()
            load.join()
            if args.channel == "websocket":
                await ws.close()
                reader.cancel()
            if receiver is not None:
                await receiver.cleanup()
    return rates, ingested, collector.latencies, collector.timeline()


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
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.rate, args.seconds, args.warmup, args.runs = 5, 200.0, 1.0, 2.0, 1
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if args.redis:
            url = stack.enter_context(redis_server())
            node_a = ServiceProcess(data_dir=Path(tmp) / "a", extra_args=("--redis-url", url)).start()
            stack.callback(node_a.stop)
            (Path(tmp) / "b").mkdir()
            (Path(tmp) / "b" / "dev-api-key").write_text(node_a.api_key + "\n")
            node_b = ServiceProcess(data_dir=Path(tmp) / "b", extra_args=("--redis-url", url)).start()
            stack.callback(node_b.stop)
            rates, ingested, latencies, timeline = uvloop.run(_measure(node_b, node_a, args))
        else:
            service = ServiceProcess(data_dir=Path(tmp) / "data").start()
            stack.callback(service.stop)
            rates, ingested, latencies, timeline = uvloop.run(_measure(service, service, args))
    delivered = statistics.median(rates)
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
    p50, p99 = quantiles[49] * 1000, quantiles[98] * 1000
    result = {
        "channel": args.channel,
        "mode": "redis, two nodes" if args.redis else "embedded, one node",
        "devices": args.devices,
        "offered_per_s": args.rate,
        "window": args.window,
        "confirmable": not args.non,
        "delivered_per_s": rates,
        "datagrams_in_per_s": ingested,
        "median": delivered,
        "ratio": delivered / args.rate,
        "latency_p50_ms": p50,
        "latency_p99_ms": p99,
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
        f"{args.rate:,.0f}/s (service received {statistics.median(ingested):,.0f} datagrams/s), ratio "
        f"{delivered / args.rate:.2f}; latency p50 {p50:.1f} ms p99 {p99:.1f} ms"
    )


if __name__ == "__main__":
    main()
