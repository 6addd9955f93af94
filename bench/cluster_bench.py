"""Cluster hand-over latency (issue 31 #1): a device request through the device's holder node vs through another.

Starts a redis-server and two `devicehub serve` processes on it (node A, node B), registers one simulated device
(this process, real UDP, a lifetime long enough that it sends no Update) on node B, and opens the application's
WebSocket channel on node B (`--channel-on a`: on node A). It then sends `--requests` device requests (GET /3/0/0)
one at a time, alternating between node B (the holder: it delivers at once) and node A (another node: it hands the
work to B through B's Redis work stream), and times each from the POST to the request reaching the device (the
hand-over's own cost) and to its async-response on the WebSocket. Both paths end the same way (B publishes the
answer; every event goes through the key's inbox in Redis, which the channel's node drains every 20 ms: most of the
end-to-end time, the same for both), so the difference is the hand-over. Prints the p50 (and p90) of each path and
their difference; writes bench/results/cluster-channel-on-<node>.json. `--smoke` sends a few requests.
Reproduce: `python bench/cluster_bench.py --requests 400` and `... --channel-on a`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from devicehub._core import CoapMessage  # noqa: E402
from devicehub.clock import SystemClock  # noqa: E402
from devicehub.lwm2m.coap.messages import Address, Reply  # noqa: E402
from devicehub.sim.device import OMA, SimDevice  # noqa: E402
from support.redis_server import redis_server  # noqa: E402
from support.service import ServiceProcess  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ANSWER_WITHIN = 10.0


class TimedDevice(SimDevice):
    """The simulator, noting when each request from the server reaches it (on this process's clock)."""

    reached: list[float]

    async def _handle(self, message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
        self.reached.append(time.perf_counter())
        return await super()._handle(message, payload, remote)


class Answers:
    """Async-responses from the WebSocket, by id, with their arrival time."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._waiting: dict[str, asyncio.Future[float]] = {}

    def expect(self, async_id: str) -> asyncio.Future[float]:
        future = self._waiting[async_id] = asyncio.get_running_loop().create_future()
        return future

    async def read(self) -> None:
        async for frame in self._ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                break
            now = time.perf_counter()
            for event in json.loads(frame.data).get("async-responses", []):
                future = self._waiting.pop(event["id"], None)
                if future is not None and not future.done():
                    if event.get("status") != 200:
                        future.set_exception(RuntimeError(f"request {event['id']} answered {event}"))
                    else:
                        future.set_result(now)


async def _measure(
    node_a: ServiceProcess, node_b: ServiceProcess, requests: int, channel_on: ServiceProcess
) -> dict[str, list[float]]:
    sim = TimedDevice(SystemClock(), ("127.0.0.1", node_b.coap_port), "bench-held", flavor=OMA, lifetime=86400)
    sim.reached = []
    headers = {"Authorization": f"Bearer {node_a.api_key}"}
    latencies: dict[str, list[float]] = {"holder": [], "other": [], "holder_device": [], "other_device": []}
    async with aiohttp.ClientSession(headers=headers) as http:
        async with http.put(f"{channel_on.base_url}/v2/notification/websocket") as r:
            assert r.status == 201, r.status
        ws = await http.ws_connect(f"{channel_on.base_url}/v2/notification/websocket-connect")
        answers = Answers(ws)
        reader = asyncio.create_task(answers.read())
        await sim.start()
        try:
            device_id = await _registered(http, node_a.base_url, sim)
            body = {"method": "GET", "uri": "/3/0/0"}
            for n in range(requests + 2):  # the first of each path warms it up (connections, caches)
                path, node = ("holder", node_b) if n % 2 == 0 else ("other", node_a)
                async_id = f"bench-{n}"
                answered = answers.expect(async_id)
                sim.reached.clear()
                sent = time.perf_counter()
                async with http.post(
                    f"{node.base_url}/v2/device-requests/{device_id}?async-id={async_id}", json=body
                ) as r:
                    assert r.status == 202, r.status
                latency = await asyncio.wait_for(answered, ANSWER_WITHIN) - sent
                if n >= 2:
                    latencies[path].append(latency * 1000)
                    latencies[f"{path}_device"].append((sim.reached[0] - sent) * 1000)
            assert sim.counters.updates == 0, "the device sent an Update: the figures would not be hand-overs"
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await ws.close()
            await sim.stop(deregister=False)
    return latencies


async def _registered(http: aiohttp.ClientSession, base_url: str, sim: SimDevice) -> str:
    """The device's id once node A reads it from the store (it registered on B)."""
    deadline = time.monotonic() + ANSWER_WITHIN
    while time.monotonic() < deadline:
        if sim.device_id:
            async with http.get(f"{base_url}/v3/devices/{sim.device_id}") as r:
                if r.status == 200:
                    return sim.device_id
        await asyncio.sleep(0.05)
    raise RuntimeError("the device did not register on node B")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="device requests, half through each node")
    parser.add_argument("--channel-on", choices=("a", "b"), default="b", help="the node with the WebSocket")
    parser.add_argument("--smoke", action="store_true", help="a few requests: checks the bench runs")
    args = parser.parse_args()
    requests = 20 if args.smoke else args.requests
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url = stack.enter_context(redis_server())
        node_a = ServiceProcess(data_dir=Path(tmp) / "a", extra_args=("--redis-url", url, "--node-id", "a")).start()
        stack.callback(node_a.stop)
        (Path(tmp) / "b").mkdir()
        (Path(tmp) / "b" / "dev-api-key").write_text(node_a.api_key + "\n")
        node_b = ServiceProcess(data_dir=Path(tmp) / "b", extra_args=("--redis-url", url, "--node-id", "b")).start()
        stack.callback(node_b.stop)
        channel_on = node_a if args.channel_on == "a" else node_b
        latencies = asyncio.run(_measure(node_a, node_b, requests, channel_on))
    holder, other = latencies["holder"], latencies["other"]
    result: dict[str, Any] = {
        "bench": "cluster",
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "requests_per_path": len(holder),
        "channel_on": "node A (another node)" if args.channel_on == "a" else "node B (the holder)",
        "holder_p50_ms": statistics.median(holder),
        "holder_p90_ms": _percentile(holder, 0.9),
        "other_p50_ms": statistics.median(other),
        "other_p90_ms": _percentile(other, 0.9),
        "to_device_holder_p50_ms": statistics.median(latencies["holder_device"]),
        "to_device_other_p50_ms": statistics.median(latencies["other_device"]),
        "to_device_holder_p90_ms": _percentile(latencies["holder_device"], 0.9),
        "to_device_other_p90_ms": _percentile(latencies["other_device"], 0.9),
    }
    result["p50_difference_ms"] = result["other_p50_ms"] - result["holder_p50_ms"]
    result["to_device_p50_difference_ms"] = result["to_device_other_p50_ms"] - result["to_device_holder_p50_ms"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"cluster-channel-on-{args.channel_on}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"cluster (channel on node {args.channel_on.upper()}): device request p50 through the holder / the other "
        f"node: to the device {result['to_device_holder_p50_ms']:.2f} / {result['to_device_other_p50_ms']:.2f} ms "
        f"({result['to_device_p50_difference_ms']:+.2f}), to the async-response {result['holder_p50_ms']:.2f} / "
        f"{result['other_p50_ms']:.2f} ms ({result['p50_difference_ms']:+.2f}); {len(holder)} requests per path"
    )


if __name__ == "__main__":
    main()
