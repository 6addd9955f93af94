"""Soak: N simulated devices with steady notifications for T minutes on one node (issue 14 #15).

Measures, on one `devicehub serve` process (embedded store, default limits): the service's RSS sampled every
`--sample` seconds, events offered / acknowledged by the service / delivered to the application's WebSocket,
losses (acknowledged but never delivered, after a drain), and the channel queue gauges and drop counters from
/metrics (queue caps hold: `queued_bytes` stays under the cap, `dropped_*` say what the caps dropped).
A load process registers `--devices` Pelion-flavoured devices (real UDP, one socket each, auto-observed
`/3/0/9`) and sends each one's confirmable notification every `--period` seconds, staggered; every payload is
unique (`<device>:<seq>`) so losses are counted exactly.
Prints one summary line and writes bench/results/soak.json.
Reproduce: `python bench/soak.py --devices 10000 --minutes 10` (smoke: `--smoke`, 50 devices for 20 s).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from devicehub._core import coap_encode, coap_encode_uint  # noqa: E402
from devicehub.clock import SystemClock  # noqa: E402
from devicehub.lwm2m import codes  # noqa: E402
from devicehub.sim.device import PELION, SimDevice  # noqa: E402
from support.service import ServiceProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


class Pump(asyncio.DatagramProtocol):
    """One device's auto-observe notifications, each with a unique payload; counts what the service ACKed."""

    def __init__(self, n: int, token: bytes, server: tuple[str, int], mid: int) -> None:
        self.n, self.token, self.server = n, token, server
        # RFC 7252 §4.4: a message id is not reused within EXCHANGE_LIFETIME from one source, so the pump goes on
        # from the simulator's next id; starting again at 1 made a notification a duplicate of the Register when
        # the ids met, answered from the service's de-dup cache and never delivered (the soak's "lost" events)
        self.seq, self.mid = 0, mid  # the last id the simulator used
        self.outstanding: dict[int, int] = {}  # message id -> seq of the notifications not yet acknowledged
        self.acked: list[int] = []  # the seqs the service acknowledged (matched by message id)
        self.resets = self.stray = 0  # RSTs, and ACKs that match no notification of ours
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def send(self) -> None:
        self.seq += 1
        self.mid = (self.mid + 1) & 0xFFFF
        options = [(codes.OBSERVE, coap_encode_uint(self.seq & 0xFFFFFF)), (codes.CONTENT_FORMAT, b"")]
        payload = f"{self.n}:{self.seq}".encode()
        self.outstanding[self.mid] = self.seq
        self.transport.sendto(
            coap_encode(codes.CON, codes.CONTENT, self.mid, self.token, options, payload), self.server
        )

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if len(data) < 4:
            return
        kind, mid = data[0] >> 4 & 3, int.from_bytes(data[2:4], "big")
        seq = self.outstanding.pop(mid, None) if kind in (codes.ACK, codes.RST) else None
        if seq is None:
            self.stray += kind == codes.ACK
        elif kind == codes.ACK:
            self.acked.append(seq)
        else:
            self.resets += 1


async def _load(server: tuple[str, int], devices: int, period: float, seconds: float, report: Any) -> None:
    loop = asyncio.get_running_loop()
    pumps: list[Pump] = []

    async def one(n: int) -> Pump:
        sim = SimDevice(SystemClock(), server, f"soak-{n}", flavor=PELION, lifetime=86_400)
        await sim.start(lifecycle=False)
        await sim.register()
        sock = sim.endpoint._transport.get_extra_info("socket").dup()  # keep the registered source address
        sim.endpoint._transport.close()
        mid = sim.endpoint._next_mid
        _, pump = await loop.create_datagram_endpoint(lambda: Pump(n, sim._auto_token, server, mid), sock=sock)
        return pump

    for first in range(0, devices, 250):  # registration ramp
        pumps.extend(await asyncio.gather(*(one(n) for n in range(first, min(first + 250, devices)))))
    report.put(("registered", len(pumps)))
    start = loop.time()
    step = period / len(pumps)  # staggered: one device after the other, each once per period
    turn = 0
    while loop.time() - start < seconds:
        due = int((loop.time() - start) / step)
        while turn < due:
            pumps[turn % len(pumps)].send()
            turn += 1
        await asyncio.sleep(0.01)
    await asyncio.sleep(5)  # the last ACKs
    acked = [f"{p.n}:{seq}" for p in pumps for seq in p.acked]
    report.put(("done", sum(p.seq for p in pumps), acked, sum(p.resets for p in pumps), sum(p.stray for p in pumps)))


def load_process(server: tuple[str, int], devices: int, period: float, seconds: float, report: Any) -> None:
    asyncio.run(_load(server, devices, period, seconds, report))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _metrics(http: aiohttp.ClientSession) -> dict[str, float]:
    async with http.get("/metrics") as r:
        values = {}
        for line in (await r.text()).splitlines():  # Prometheus text format
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values


async def _soak(service: ServiceProcess, args: argparse.Namespace) -> dict[str, Any]:
    assert service.process is not None
    pid = service.process.pid
    headers = {"Authorization": f"Bearer {service.api_key}"}
    received: set[str] = set()
    duplicates = 0
    progress = asyncio.Event()
    async with aiohttp.ClientSession(service.base_url, headers=headers) as http:
        async with http.put("/v2/subscriptions", json=[{"resource-path": ["/3/0/9"]}]) as r:
            assert r.status == 202, r.status
        async with http.put("/v2/notification/websocket", json={"serialization": {"max_chunk_size": 10000}}) as r:
            assert r.status in (200, 201), await r.text()
        ws = await http.ws_connect("/v2/notification/websocket-connect", max_msg_size=64 * 1024 * 1024)

        async def read() -> None:
            nonlocal duplicates
            async for frame in ws:
                for note in json.loads(frame.data).get("notifications", []):
                    value = base64.b64decode(note["payload"]).decode()
                    if ":" not in value:
                        continue  # a value from the registration or the first observe, not one of the load's
                    if value in received:
                        duplicates += 1
                    received.add(value)
                progress.set()

        reader = asyncio.create_task(read())
        report: Any = multiprocessing.get_context("spawn").Queue()
        seconds = args.minutes * 60
        load = multiprocessing.get_context("spawn").Process(
            target=load_process, args=(("127.0.0.1", service.coap_port), args.devices, args.period, seconds, report)
        )
        load.start()
        loop = asyncio.get_running_loop()
        registered_at = time.monotonic()
        _, registered = await loop.run_in_executor(None, report.get)
        ramp = time.monotonic() - registered_at
        samples: list[dict[str, float]] = []
        start = time.monotonic()
        while True:
            metrics = await _metrics(http)
            samples.append(
                {
                    "t": round(time.monotonic() - start, 1),
                    "rss_mib": round(rss_mib(pid), 1),
                    "received": len(received),
                    "queued_events": metrics.get("devicehub_queue_events", 0),
                    "queued_bytes": metrics.get("devicehub_queue_bytes", 0),
                }
            )
            print(f"soak: {samples[-1]}", flush=True)
            if time.monotonic() - start >= seconds:
                break
            await asyncio.sleep(args.sample)
        _, sent, acked_list, resets, stray = await loop.run_in_executor(None, report.get)
        load.join()
        acked = set(acked_list)
        while not acked <= received:  # drain: until every acknowledged event came, or 30 s without one
            progress.clear()
            try:
                await asyncio.wait_for(progress.wait(), 30)
            except TimeoutError:
                break
        metrics = await _metrics(http)
        await ws.close()
        reader.cancel()
    # exact accounting: each payload is unique, so an acknowledged event is lost when it never came
    missing = sorted(acked - received, key=lambda v: tuple(map(int, v.split(":"))))
    unacked_delivered = len(received - acked)
    warm = [s["rss_mib"] for s in samples if s["t"] >= min(60.0, seconds / 3)] or [samples[-1]["rss_mib"]]
    return {
        "devices": registered,
        "minutes": args.minutes,
        "period_s": args.period,
        "registration_ramp_s": round(ramp, 1),
        "events_sent": sent,
        "events_acked": len(acked),
        "events_delivered": len(received),
        "duplicates": duplicates,
        "lost": len(missing),
        "lost_examples": missing[:20],
        "delivered_not_acked": unacked_delivered,  # an ACK the load process did not see (its socket buffer)
        "resets": resets,
        "stray_acks": stray,
        "stale_notifications": metrics.get("devicehub_notifications_stale_total", 0),
        "coap_duplicates": metrics.get("devicehub_coap_duplicates_total", 0),
        "coap_rate_limited": sum(v for k, v in metrics.items() if k.startswith("devicehub_coap_rate_limited_total")),
        "notifications_accepted": metrics.get("devicehub_notifications_total", 0),
        "events_enqueued": metrics.get('devicehub_events_enqueued_total{kind="notification"}', 0),
        "events_per_s": round(len(received) / seconds, 1),
        "rss_mib_start": samples[0]["rss_mib"],
        "rss_mib_after_warmup": warm[0],
        "rss_mib_end": samples[-1]["rss_mib"],
        "rss_mib_max": max(s["rss_mib"] for s in samples),
        "max_queued_bytes": max(s["queued_bytes"] for s in samples),
        "dropped_overflow": metrics.get('devicehub_events_dropped_total{cause="overflow"}', 0),
        "dropped_expired": metrics.get('devicehub_events_dropped_total{cause="expired"}', 0),
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--period", type=float, default=10.0, help="seconds between two notifications of a device")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--smoke", action="store_true", help="50 devices for 20 s, samples every 2 s")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.minutes, args.period, args.sample = 50, 20 / 60, 1.0, 2.0
    with tempfile.TemporaryDirectory() as tmp:
        service = ServiceProcess(data_dir=Path(tmp) / "data").start()
        try:
            result = asyncio.run(_soak(service, args))
        finally:
            service.stop()
    RESULTS.mkdir(exist_ok=True)
    name = "soak_smoke.json" if args.smoke else "soak.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"soak: devices={result['devices']} minutes={result['minutes']:g} events/s={result['events_per_s']} "
        f"acked={result['events_acked']} delivered={result['events_delivered']} lost={result['lost']} "
        f"rss_mib start={result['rss_mib_start']} warm={result['rss_mib_after_warmup']} end={result['rss_mib_end']} "
        f"max={result['rss_mib_max']} dropped_overflow={result['dropped_overflow']:g}"
    )
    if args.smoke and result["lost"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
