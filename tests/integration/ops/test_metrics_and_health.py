"""`/metrics` in the Prometheus format (parsed with prometheus_client.parser), `/healthz`, `/readyz` (issue 17 §8)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicehub.config import ServeSettings
from devicehub.node import Node
from support.node import device, run, running_node
from support.redis_server import redis_server

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(http: aiohttp.ClientSession) -> tuple[Samples, dict[str, str]]:
    async with http.get("/metrics") as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await r.text()
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_scrape_after_a_simulated_run_counts_what_happened(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                before, types = await scrape(http)
                async with http.put("/v2/notification/websocket") as r:
                    assert r.status in (200, 201)
                ws = await http.ws_connect("/v2/notification/websocket-connect")
                async with device(node, "metrics-1"), device(node, "metrics-2") as sim:
                    registrations: list[object] = []
                    while len(registrations) < 2:  # both registration events reached the application
                        registrations += (await ws.receive_json(timeout=10)).get("registrations", [])
                    for _ in range(3):
                        async with http.get("/v3/devices") as r:
                            assert r.status == 200
                    async with http.get(f"/v3/devices/{sim.device_id}/echo") as r:
                        assert r.status == 200
                    async with http.get("/v3/devices/no-such-device/echo") as r:
                        assert r.status == 404
                    async with http.get("/v3/devices", headers={"Authorization": "Bearer wrong"}) as r:
                        assert r.status == 401
                    during, _ = await scrape(http)
                after, _ = await scrape(http)
                await ws.close()

        # each family is declared with HELP/TYPE; counters and histograms are typed as such
        assert types["devicehub_registrations"] == "counter"
        assert types["devicehub_http_request_duration_seconds"] == "histogram"
        assert types["devicehub_process_resident_memory_bytes"] == "gauge"
        assert value(during, "devicehub_process_resident_memory_bytes") > 0
        assert "devicehub_process_cpu_seconds_total" in {name for name, _ in during}

        accepted = "devicehub_registrations_total"
        assert value(during, accepted, outcome="accepted") - value(before, accepted, outcome="accepted") == 2
        assert value(during, accepted, outcome="refused") == 0
        assert value(during, "devicehub_registered_devices") == 2
        assert value(after, "devicehub_deregistrations_total") - value(before, "devicehub_deregistrations_total") == 2
        assert value(after, "devicehub_registered_devices") == 0
        # two Registers and two De-registers came in, each answered: at least 4 datagrams each way
        assert value(after, "devicehub_coap_datagrams_total", direction="in") >= 4
        assert value(after, "devicehub_coap_datagrams_total", direction="out") >= 4
        # issue 31 #4: notifications of tokens this node did not hold, by outcome (none here: every token is held)
        assert types["devicehub_unknown_token_notifications"] == "counter"
        for outcome in (
            "looked_up",
            "shed",
            "missed_cached",
            "not_stored",
            "ended",
            "not_observed",
            "identity_refused",
        ):
            assert value(after, "devicehub_unknown_token_notifications_total", outcome=outcome) == 0
        # the notification lane (issue 15 #2): nothing observed here, so nothing armed or taken
        assert types["devicehub_coap_lane_datagrams"] == "counter"
        assert value(after, "devicehub_coap_lane_datagrams_total", listener="coap") == 0
        assert ("devicehub_coap_lane_datagrams_total", (("listener", "coaps"),)) in after
        assert ("devicehub_peer_table_size", (("table", "lane_armed"),)) in after
        assert value(after, "devicehub_peer_table_size", table="lane_armed") == 0

        enqueued = "devicehub_events_enqueued_total"
        assert value(during, enqueued, kind="registration") - value(before, enqueued, kind="registration") == 2
        assert value(during, enqueued, kind="notification") == value(before, enqueued, kind="notification")
        assert value(during, "devicehub_events_delivered_total") >= 2
        # device → application latency: one observation per delivered event, each well under the largest bucket
        latency = "devicehub_event_delivery_latency_seconds"
        assert types[latency] == "histogram"
        delivered = value(during, "devicehub_events_delivered_total") - value(
            before, "devicehub_events_delivered_total"
        )
        assert value(during, f"{latency}_count") - value(before, f"{latency}_count") == delivered
        assert value(during, f"{latency}_bucket", le="10.0") == value(during, f"{latency}_count")
        by_kind = "devicehub_event_delivery_latency_by_kind_seconds"  # issue 34 #6: per channel kind
        assert types[by_kind] == "histogram"
        assert (
            value(during, f"{by_kind}_count", kind="websocket") - value(before, f"{by_kind}_count", kind="websocket")
            == delivered
        )
        assert value(during, f"{by_kind}_count", kind="callback") == 0
        assert value(during, "devicehub_websocket_connections") == 1
        assert value(during, "devicehub_events_dropped_total", cause="overflow") == 0
        assert types["devicehub_events_dropped"] == "counter"

        requests = "devicehub_http_requests_total"
        assert value(during, requests, method="GET", route="/v3/devices", status="200") == 3
        assert value(during, requests, method="GET", route="/v3/devices", status="401") == 1
        # the route template is the label, never the device id of the raw path
        echo_route = "/v3/devices/{device_id}/echo"
        labels = {dict(lbl).get("route") for _, lbl in during}
        assert not any(str(r).endswith("no-such-device/echo") for r in labels)
        count = "devicehub_http_request_duration_seconds_count"
        assert value(during, count, method="GET", route="/v3/devices") == 4
        assert value(during, count, method="GET", route=echo_route) == 2
        assert value(during, requests, method="GET", route=echo_route, status="404") == 1
        bucket = "devicehub_http_request_duration_seconds_bucket"
        assert value(during, bucket, method="GET", route="/v3/devices", le="+Inf") == 4
        # /metrics counts itself: the first scrape is seen by the second
        assert value(during, requests, method="GET", route="/metrics", status="200") == 1

    run(scenario())


@pytest.mark.parametrize("store", ["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def test_pending_device_requests_gauge_counts_what_waits_in_the_store(tmp_path: Path, store: str) -> None:
    """The gauge is the store's count of queued requests (read without decoding them, once per scrape)."""

    async def scenario(redis_url: str) -> None:
        async with running_node(tmp_path, redis_url=redis_url) as node:
            async with device(node, "pending-1") as sim:
                device_id = sim.device_id or ""
            # the device is gone (de-registered): requests for it wait in the queue
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                before, _ = await scrape(http)
                for async_id in ("p1", "p2", "p3"):
                    body = {"method": "GET", "uri": "/3/0/0"}
                    async with http.post(f"/v2/device-requests/{device_id}?async-id={async_id}", json=body) as r:
                        assert r.status == 202, await r.text()
                during, _ = await scrape(http)
                waiting = await node.store.all_pending_requests()
                assert [r.async_id for r in waiting] == ["p1", "p2", "p3"]
                assert await node.store.remove_request(waiting[1].key_id, "p2")
                after, _ = await scrape(http)
        assert value(before, "devicehub_device_requests_pending") == 0
        assert value(during, "devicehub_device_requests_pending") == 3
        assert value(after, "devicehub_device_requests_pending") == 2

    if store == "redis":
        with redis_server() as url:
            run(scenario(url))
    else:
        run(scenario(""))


def test_two_nodes_in_one_process_keep_their_own_registries(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path / "a") as a, running_node(tmp_path / "b") as b:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{a.http_port}/healthz") as r:
                    assert r.status == 200
                async with http.get(f"http://127.0.0.1:{b.http_port}/metrics") as r:
                    samples = {
                        (s.name, tuple(sorted(s.labels.items()))): s.value
                        for f in text_string_to_metric_families(await r.text())
                        for s in f.samples
                    }
        key = ("devicehub_http_requests_total", (("method", "GET"), ("route", "/healthz"), ("status", "200")))
        assert key not in samples  # node a's request is not on node b's page

    run(scenario())


@pytest.mark.redis
def test_readyz_fails_while_redis_is_down_and_health_stays_alive(tmp_path: Path) -> None:
    with redis_server() as url:
        settings = ServeSettings(
            host="127.0.0.1", http_port=0, coap_port=0, coaps_port=0, data_dir=tmp_path, redis_url=url, dev=True
        )

        async def scenario(stop_redis: asyncio.Event, stopped: asyncio.Event) -> None:
            node = Node(settings)
            await node.start()
            try:
                async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as http:
                    async with http.get("/readyz") as r:
                        assert r.status == 200, await r.text()
                        ready = await r.json()
                        assert ready["checks"] == {"store": "ok", "lwm2m_listener": "ok"}
                        # issue 13 #4: the device security policy is stated (no DTLS port here; --dev takes NoSec)
                        assert ready["security"] == {
                            "dtls": False,
                            "coaps_port": None,
                            "allow_nosec": True,
                            "coaps_tcp_port": None,
                        }
                    stop_redis.set()
                    await stopped.wait()
                    async with http.get("/readyz") as r:
                        assert r.status == 503
                        body = await r.json()
                        assert body["status"] == "unavailable" and body["checks"]["store"].startswith("failing")
                    for path in ("/healthz", "/health"):
                        async with http.get(path) as r:
                            assert r.status == 200
            finally:
                await node.stop()

        async def main() -> None:
            stop_redis, stopped = asyncio.Event(), asyncio.Event()
            task = asyncio.create_task(scenario(stop_redis, stopped))
            await stop_redis.wait()
            await asyncio.to_thread(_stop_redis, url)
            stopped.set()
            await task

        run(main())


def _stop_redis(url: str) -> None:
    """SHUTDOWN the real server (the fixture's terminate() then finds it gone)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.shutdown(nosave=True)
    except redis.exceptions.ConnectionError:
        pass  # the server closes the connection as it exits
    finally:
        client.close()


def test_datagrams_the_kernel_dropped_at_the_coap_listener_are_counted(tmp_path: Path) -> None:
    """Issue 16: a storm's datagrams that did not fit the listener's receive buffer were lost without a trace in the
    service (only /proc/net/snmp, for the whole machine, showed them); /metrics counts them for the listener. The
    buffer is shrunk here so that a burst sent while the loop cannot read overflows it."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            endpoint = node.lwm2m.listeners.plain
            assert endpoint is not None and endpoint.datagram_socket is not None
            listener = endpoint.datagram_socket
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                before, types = await scrape(http)
                assert types["devicehub_udp_receive_drops"] == "counter"
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
                    for _ in range(100):  # 1 KiB each, no await: far more than 4 KiB holds before the loop reads
                        sender.sendto(bytes(1024), ("127.0.0.1", node.coap_port))
                after, _ = await scrape(http)
        dropped = value(after, "devicehub_udp_receive_drops_total", listener="coap")
        assert value(before, "devicehub_udp_receive_drops_total", listener="coap") == 0
        assert 50 <= dropped <= 100
        assert value(after, "devicehub_udp_receive_drops_total", listener="coaps") == 0

    run(scenario())
