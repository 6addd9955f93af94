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

`--commands` (issue 31 #6) measures instead what each operation costs Redis: one node on one redis-server (or on a
3-primary Redis Cluster with `--cluster`), `--devices` simulated devices and one WebSocket channel; for each phase
(registration, Update, subscription, notification, device request) the `INFO commandstats` calls (commands a script
runs counted too: Redis's own work), the bytes in and out (`INFO stats`) and the data set's memory
(`used_memory_dataset`: not client buffers) per operation, all as deltas over the phase (until Redis is back to the
node's idle rate: a registration batch is written after its answers) less that idle rate (heartbeats, the channel's
inbox poll) over the phase's length, divided by the operations done. Writes bench/results/cluster-commands.json; the
capacity table in bench/README.md is projected from it.
`--node-kill` (issue 31 #4): three nodes on one redis-server behind nginx (docker/nginx.conf, tests/support/front.py);
`--devices` simulated devices at distinct loopback addresses send a CON notification every `--period` seconds
(staggered); a WebSocket application on every node and a callback application per node (tests/support/node_kill.py)
each get every notification; device requests (and, one in four, a subscription to /3/0/9, answered by an
async-response too) go through the front every 0.25 s. After `--before` seconds the node
holding the most devices is killed with SIGKILL; `--after` seconds later the values stop and the run waits (up to the
CoAP retransmission window, 93 s) for what is still under way. Counts, per application: notifications the devices
sent and had acknowledged that never reached it (lost), those dropped by the node as older than one it had already
taken (superseded: a device retransmitting several CONs at once to its new node, RFC 7641 §3.4), async-responses
lost; and the time from the kill to each of the dead node's devices' first acknowledged notification (re-home).
Writes bench/results/cluster-node-kill.json. Reproduce: `python bench/cluster_bench.py --node-kill --devices 300`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
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
from devicehub.sim.objects import TEMPERATURE  # noqa: E402
from support.front import ThreeNodes, three_nodes_behind_the_front  # noqa: E402
from support.node_kill import App, applications, fleet  # noqa: E402
from support.redis_server import redis_cluster, redis_server  # noqa: E402
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


class RedisMeter:
    """Redis's counters (summed over every primary of a cluster): commands by name, bytes in and out, memory."""

    def __init__(self, url: str, cluster: bool) -> None:
        import redis

        self._client: Any = redis.RedisCluster.from_url(url) if cluster else redis.Redis.from_url(url)
        self._cluster = cluster

    def _info(self, section: str) -> list[dict[str, Any]]:
        if self._cluster:
            return list(self._client.info(section, target_nodes=self._client.PRIMARIES).values())
        return [self._client.info(section)]

    def sample(self) -> dict[str, float]:
        counts: dict[str, float] = {"at": time.perf_counter()}
        for info in self._info("commandstats"):
            for name, stats in info.items():
                command = name.removeprefix("cmdstat_")
                if command not in ("info", "cluster|info", "cluster|slots", "cluster|shards", "command"):
                    counts[command] = counts.get(command, 0) + stats["calls"]
        for info in self._info("stats"):
            counts["bytes_in"] = counts.get("bytes_in", 0) + info["total_net_input_bytes"]
            counts["bytes_out"] = counts.get("bytes_out", 0) + info["total_net_output_bytes"]
        for info in self._info("memory"):
            counts["memory"] = counts.get("memory", 0) + info["used_memory_dataset"]  # not client buffers
        return counts

    def close(self) -> None:
        self._client.close()


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}


def _commands(delta: dict[str, float]) -> float:
    return sum(v for k, v in delta.items() if k not in ("at", "bytes_in", "bytes_out", "memory"))


async def _quiet(meter: RedisMeter, idle: dict[str, float]) -> None:
    """Wait until Redis runs no more than the idle rate (with slack) for a second: the phase's writes are done (the
    write-behind's flush, a registration batch written after its answers, which a loaded machine may delay)."""
    await asyncio.sleep(0.3)
    last = meter.sample()
    quiet = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and quiet < 4:
        await asyncio.sleep(0.25)
        now = meter.sample()
        delta = _delta(last, now)
        quiet = quiet + 1 if _commands(delta) <= _commands(idle) * delta["at"] * 1.5 + 5 else 0
        last = now


async def _phase(meter: RedisMeter, idle: dict[str, float], name: str, operations: int, run: Any) -> dict[str, Any]:
    """`run()` (operations done and their effects seen), then quiet again; the deltas less the idle rates over the
    same time, per operation."""
    before = meter.sample()
    await run()
    await _quiet(meter, idle)
    delta = _delta(before, meter.sample())
    seconds = delta.pop("at")
    net = {k: v - idle.get(k, 0) * seconds for k, v in delta.items() if k != "memory"}
    per_op = {k: round(v / operations, 2) for k, v in sorted(net.items()) if abs(v / operations) >= 0.05}
    return {
        "phase": name,
        "operations": operations,
        "seconds": round(seconds, 3),
        "commands_per_op": round(_commands(net) / operations, 2),
        "bytes_in_per_op": round(net["bytes_in"] / operations),
        "bytes_out_per_op": round(net["bytes_out"] / operations),
        "memory_per_op": round(delta["memory"] / operations),
        "by_command": {k: v for k, v in per_op.items() if k not in ("bytes_in", "bytes_out")},
    }


async def _measure_commands(node: ServiceProcess, meter: RedisMeter, devices: int, notifications: int) -> list[Any]:
    headers = {"Authorization": f"Bearer {node.api_key}"}
    sims = [
        SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), f"cmd-{n}", flavor=OMA, lifetime=86400)
        for n in range(devices)
    ]
    results: list[Any] = []
    async with aiohttp.ClientSession(node.base_url, headers=headers) as http:
        async with http.put("/v2/notification/websocket") as r:
            assert r.status == 201, r.status
        ws = await http.ws_connect("/v2/notification/websocket-connect")
        seen: dict[str, int] = {"notifications": 0, "async-responses": 0}

        async def read() -> None:
            async for frame in ws:
                if frame.type != aiohttp.WSMsgType.TEXT:
                    break
                message = json.loads(frame.data)
                for kind in seen:
                    seen[kind] += len(message.get(kind, []))

        reader = asyncio.create_task(read())

        async def until(check: Any, what: str) -> None:
            deadline = time.monotonic() + 60
            while not check():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what}: not done within 60 s")
                await asyncio.sleep(0.01)

        start = meter.sample()
        await asyncio.sleep(2.0)  # the idle rate: heartbeats, leases, the channel's inbox poll
        idle_delta = _delta(start, meter.sample())
        idle = {k: v / idle_delta["at"] for k, v in idle_delta.items() if k != "at"}
        results.append({"phase": "idle", "commands_per_s": round(_commands(idle), 1)})

        async def register() -> None:
            await asyncio.gather(*(sim.start() for sim in sims))
            await until(lambda: all(sim.device_id for sim in sims), "registrations")

        results.append(await _phase(meter, idle, "registration", devices, register))

        async def update() -> None:
            codes = await asyncio.gather(*(sim.update() for sim in sims))
            assert all(c == codes[0] for c in codes), codes

        results.append(await _phase(meter, idle, "update", devices, update))

        async def subscribe() -> None:
            for sim in sims:
                async with http.put(f"/v2/subscriptions/{sim.device_id}{TEMPERATURE}") as r:
                    assert r.status in (200, 202), r.status
            await until(lambda: all(sim.observers.by_token for sim in sims), "observations")

        results.append(await _phase(meter, idle, "subscription", devices, subscribe))

        async def notify() -> None:
            for round_ in range(notifications):
                for sim in sims:
                    sim.set_value(TEMPERATURE, 20.0 + round_ + 0.5)
                await until(lambda r=round_: seen["notifications"] >= devices * (r + 1), "notifications")

        results.append(await _phase(meter, idle, "notification", devices * notifications, notify))

        async def request() -> None:
            for n, sim in enumerate(sims):
                body = {"method": "GET", "uri": "/3/0/0"}
                async with http.post(f"/v2/device-requests/{sim.device_id}?async-id=c{n}", json=body) as r:
                    assert r.status == 202, r.status
            await until(lambda: seen["async-responses"] >= devices, "async-responses")

        results.append(await _phase(meter, idle, "device request", devices, request))
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await ws.close()
    for sim in sims:
        await sim.stop(deregister=False)
    return results


def commands_main(args: argparse.Namespace) -> None:
    devices = 20 if args.smoke else args.devices
    notifications = 2 if args.smoke else args.notifications
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url = stack.enter_context(redis_cluster() if args.cluster else redis_server())
        node = ServiceProcess(data_dir=Path(tmp) / "a", extra_args=("--redis-url", url, "--node-id", "a")).start()
        stack.callback(node.stop)
        meter = RedisMeter(url, args.cluster)
        stack.callback(meter.close)
        phases = asyncio.run(_measure_commands(node, meter, devices, notifications))
    result = {
        "bench": "cluster-commands",
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "redis": "cluster of 3 primaries" if args.cluster else "one redis-server",
        "devices": devices,
        "phases": phases,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "cluster-commands" + ("-cluster" if args.cluster else "") + ("-smoke" if args.smoke else "")
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    summary = ", ".join(
        f"{p['phase']} {p['commands_per_op']} cmds/{p['bytes_in_per_op'] + p['bytes_out_per_op']} B"
        for p in phases
        if "commands_per_op" in p
    )
    print(f"redis commands per operation ({result['redis']}, {devices} devices): {summary}")


RETRANSMISSION_WINDOW = 93.0  # RFC 7252 §4.8.2 MAX_TRANSMIT_WAIT with the default parameters


async def _node_kill(
    nodes: ThreeNodes, devices: int, period: float, before: float, after: float, victim: str | None
) -> dict[str, Any]:
    front = nodes.front
    async with aiohttp.ClientSession() as http:
        apps = await applications(
            http, front.base_url, [n.base_url for n in nodes.nodes], nodes.nodes[0].api_key, "nk-"
        )
        sims = fleet(front.coap_address, devices, "nk-")
        for n in range(0, devices, 50):  # registrations in waves: the figure is about the kill, not a storm
            await asyncio.gather(*(sim.start() for sim in sims[n : n + 50]))
            await asyncio.sleep(0.2)
        try:
            await _wait(
                lambda: all(s.device_id for s in sims) and len(nodes.holders()) == devices,
                60,
                "registered",
                lambda: (sum(bool(s.device_id) for s in sims), len(nodes.holders()), {s.last_failure for s in sims}),
            )
            ids = [str(s.device_id) for s in sims]
            await _wait(lambda: all(21.5 in a.values.get(i, ()) for a in apps.all for i in ids), 60, "observed")
            holders = nodes.holders()
            asked: list[tuple[App, str]] = []
            stop = asyncio.Event()
            changer = asyncio.create_task(_change(sims, period, stop))
            requester = asyncio.create_task(_request(http, front.base_url, apps.all, sims, asked, stop))
            await asyncio.sleep(before)
            victim = victim or max(set(holders.values()), key=list(holders.values()).count)
            killed_at = time.monotonic()
            nodes.nodes["abc".index(victim[-1])].stop(signal.SIGKILL)
            await asyncio.sleep(after)
            stop.set()
            await asyncio.gather(changer, requester)

            def settled() -> bool:
                sent = all(ack is not None for s in sims for _, ack in s.sent.values())
                return sent and all(async_id in app.answers for app, async_id in asked)

            with contextlib.suppress(AssertionError):
                await _wait(settled, RETRANSMISSION_WINDOW, "settled")
            await asyncio.sleep(2.0)  # the last acknowledged values through the inboxes and channels
            live = [n.base_url for n in nodes.nodes if n.process is not None]
            unknown = {url: await _outcomes(http, url, "devicehub_unknown_token_notifications_total") for url in live}
            handovers = {url: await _outcomes(http, url, "devicehub_device_handovers_total") for url in live}
        finally:
            await asyncio.gather(*(s.stop(deregister=False) for s in sims))
            await apps.stop()
    moved = [s for s in sims if holders[str(s.device_id)] == victim]
    lost = superseded = unacked = expected = 0
    for app in apps.all:
        for sim in sims:
            got = app.values.get(str(sim.device_id), set())
            for value, (_, acked) in sim.sent.items():
                if acked is None:
                    unacked += 1
                    continue
                expected += 1
                if value in got:
                    continue
                if acked > killed_at and any(v > value for v in got):
                    superseded += 1
                else:
                    lost += 1
    rehome = []
    for sim in moved:
        after_kill = [(sent, ack) for sent, ack in sim.sent.values() if sent >= killed_at]
        if after_kill:
            _, ack = min(after_kill)
            rehome.append((ack if ack is not None else float("inf")) - killed_at)
    answers = [app.answers.get(async_id) for app, async_id in asked]
    unanswered_holder = {a: holders[d] for a, d in targets.items()}
    return {
        "bench": "cluster-node-kill",
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "devices": devices,
        "period_s": period,
        "applications": len(apps.all),
        "killed": victim,
        "devices_on_killed_node": len(moved),
        "notifications_sent": sum(len(s.sent) for s in sims),
        "deliveries_expected": expected,
        "deliveries_lost": lost,
        "deliveries_superseded": superseded,
        "notifications_unacknowledged": unacked,
        "lost_ratio": lost / expected if expected else 0.0,
        "device_requests": len(asked),
        "async_responses_lost": sum(answer is None for answer in answers),
        "async_responses_not_200": sum(answer not in (None, 200) for answer in answers),
        "rehome_p50_s": statistics.median(rehome) if rehome else None,
        "rehome_max_s": max(rehome) if rehome else None,
        "unknown_token_notifications": unknown,
        # work taken for another node's device: `orphaned` (its holder was dead), `waited` (an observe that waited for
        # the device while no live node held it, done at its re-home), `salvaged` (handed to the dying node)
        "handovers": handovers,
        "websocket_reconnects": sum(app.reconnects for app in apps.sockets),
        # a device whose notification was answered RST drops its observation (RFC 7641 §3.6) and notifies no more
        "moved_devices_observation_cancelled": sum(1 for s in moved if not s.observers.by_token),
        "moved_devices_errors": sum(s.counters.errors for s in moved),
        "moved_devices_timeouts": sum(s.counters.timeouts for s in moved),
        "unacknowledged_by_holder": {
            node: sum(1 for s in sims if holders[str(s.device_id)] == node for _, ack in s.sent.values() if ack is None)
            for node in sorted(set(holders.values()))
        },
        "unanswered_by_holder": {
            node: sum(
                1
                for app, a in asked
                if app.answers.get(a) is None and a in unanswered_holder and unanswered_holder[a] == node
            )
            for node in sorted(set(holders.values()))
        },
    }


async def _outcomes(http: aiohttp.ClientSession, base_url: str, metric: str) -> dict[str, float]:
    """A live node's counter `metric` by outcome (devicehub_unknown_token_notifications_total: why it refused unknown
    tokens; devicehub_device_handovers_total: what became of work for other nodes' devices)."""
    async with http.get(f"{base_url}/metrics") as r:
        text = await r.text()
    counts = {}
    for line in text.splitlines():
        if line.startswith(metric + "{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = float(line.rsplit(" ", 1)[1])
    return counts


async def _change(sims: list[Any], period: float, stop: asyncio.Event) -> None:
    """Each device's temperature once a period, the fleet spread evenly over it."""
    value = 100.0
    while not stop.is_set():
        for sim in sims:
            if stop.is_set():
                return
            value += 1
            sim.set_value(TEMPERATURE, value)
            await asyncio.sleep(period / len(sims))


targets: dict[str, str] = {}  # async-id → device id


async def _request(
    http: aiohttp.ClientSession, front: str, apps: list[App], sims: list[Any], asked: list[Any], stop: asyncio.Event
) -> None:
    n = 0
    while not stop.is_set():
        app, sim = apps[n % len(apps)], sims[(n * 7) % len(sims)]
        headers = {"Authorization": f"Bearer {app.key}"}
        with contextlib.suppress(aiohttp.ClientError):
            if n % 4 == 3:  # a subscription (its observe is handed to the device's holder: issue 31 #1)
                async with http.put(f"{front}/v2/subscriptions/{sim.device_id}/3/0/9", headers=headers) as r:
                    if r.status == 202:
                        async_id = str((await r.json())["async-response-id"])
                        asked.append((app, async_id))
                        targets[async_id] = str(sim.device_id)
            else:
                async_id = f"nk-{n}"
                async with http.post(
                    f"{front}/v2/device-requests/{sim.device_id}?async-id={async_id}",
                    json={"method": "GET", "uri": "/3/0/0"},
                    headers=headers,
                ) as r:
                    if r.status == 202:
                        asked.append((app, async_id))
                        targets[async_id] = str(sim.device_id)
        n += 1
        await asyncio.sleep(0.25)


async def _wait(check: Any, within: float, what: str, detail: Any = None) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within:g} s" + (f" ({detail()})" if detail else ""))
        await asyncio.sleep(0.1)


def node_kill(args: argparse.Namespace) -> None:
    devices, before, after = (30, 3.0, 20.0) if args.smoke else (args.devices, args.before, args.after)
    with tempfile.TemporaryDirectory() as tmp, three_nodes_behind_the_front(Path(tmp)) as nodes:
        result = asyncio.run(_node_kill(nodes, devices, args.period, before, after, args.victim))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster-node-kill.json").write_text(json.dumps(result, indent=2) + "\n")
    rehome = result["rehome_p50_s"], result["rehome_max_s"]
    print(
        f"cluster node kill: {result['devices']} devices ({result['devices_on_killed_node']} on {result['killed']}), "
        f"{result['notifications_sent']} CON notifications to {result['applications']} applications: "
        f"{result['deliveries_lost']} of {result['deliveries_expected']} deliveries lost "
        f"({100 * result['lost_ratio']:.3f} %), {result['deliveries_superseded']} superseded, "
        f"{result['notifications_unacknowledged']} unacknowledged; async-responses lost "
        f"{result['async_responses_lost']} of {result['device_requests']}; "
        f"{result['moved_devices_observation_cancelled']} moved devices reset; re-home p50 / max "
        + (f"{rehome[0]:.1f} / {rehome[1]:.1f} s" if rehome[0] is not None else "n/a")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="device requests, half through each node")
    parser.add_argument("--channel-on", choices=("a", "b"), default="b", help="the node with the WebSocket")
    parser.add_argument("--smoke", action="store_true", help="a few requests: checks the bench runs")
    parser.add_argument("--commands", action="store_true", help="Redis commands and bytes per operation instead")
    parser.add_argument("--cluster", action="store_true", help="--commands on a 3-primary Redis Cluster")
    parser.add_argument("--notifications", type=int, default=5, help="--commands: notifications per device")
    parser.add_argument("--node-kill", action="store_true", help="kill one of three nodes behind nginx under load")
    parser.add_argument("--devices", type=int, default=None, help="simulated devices (--commands 200, --node-kill 300)")
    parser.add_argument("--victim", choices=("node-a", "node-b", "node-c"), help="--node-kill: the node killed")
    parser.add_argument("--period", type=float, default=5.0, help="--node-kill: seconds between a device's values")
    parser.add_argument("--before", type=float, default=10.0, help="--node-kill: seconds of load before the kill")
    parser.add_argument("--after", type=float, default=60.0, help="--node-kill: seconds of load after the kill")
    args = parser.parse_args()
    if args.commands:
        args.devices = args.devices or 200
        commands_main(args)
        return
    if args.node_kill:
        args.devices = args.devices or 300
        node_kill(args)
        return
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
