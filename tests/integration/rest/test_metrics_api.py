"""Account usage over time (issue 32 #3, Pelion's `GET /v3/metrics`), on both stores: Registers, Updates and
De-registers of simulated devices and the account's REST calls, counted by the hour on a real node and summed per
interval; notifications and device requests counted as transactions; the registered devices sampled; every metric
of Pelion's statistics API served (the official SDK asks for all of them by default); an unknown one or a bad range
is 400."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from devicehub.clock import ManualClock, SystemClock
from devicehub.domain.timefmt import rfc3339
from devicehub.lwm2m.security import ClientCredentials
from devicehub.node import Node
from devicehub.sim.device import SimDevice
from devicehub.store.usage_writer import flush_usage
from support.apps import websocket_app
from support.node import device, run, running_node
from support.ports import free_udp_port

INCLUDE = "full_registrations,registration_updates,deleted_registrations,connect_rest_api_error,total_count"


def _session(node: Node) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        f"http://127.0.0.1:{node.http_port}", headers={"Authorization": f"Bearer {node.dev_api_key}"}
    )


async def _get(http: aiohttp.ClientSession, path: str, status: int = 200) -> Any:
    async with http.get(path) as r:
        assert r.status == status, await r.text()
        return await r.json()


def test_registrations_and_rest_calls_are_counted_by_interval(tmp_path: Path, store_url: str) -> None:
    async def scenario() -> None:
        clock = ManualClock()  # starts on an hour
        hour = clock.now()
        async with running_node(tmp_path, clock=clock, redis_url=store_url) as node, _session(node) as http:
            async with device(node, "use-a", lifetime=86_400) as a, device(node, "use-b", lifetime=86_400):
                await a.update()
                await _get(http, f"/v3/devices/{'0' * 32}", 404)  # an error of the account's
                await clock.advance(3600)
                async with device(node, "use-c"):
                    pass  # registered and de-registered in the second hour
            await _get(http, f"/v3/devices/{'0' * 32}", 404)
            span = f"start={rfc3339(hour)}&end={rfc3339(hour + 3 * 3600)}"

            hourly = await _get(http, f"/v3/metrics?include={INCLUDE}&interval=1h&{span}")
            assert hourly["object"] == "list" and hourly["total_count"] == 3 and hourly["has_more"] is False
            first, second, third = hourly["data"]
            assert first["timestamp"] == rfc3339(hour) and second["timestamp"] == rfc3339(hour + 3600)
            assert {k: v for k, v in first.items() if k not in ("id", "timestamp")} == {
                "full_registrations": 2,
                "registration_updates": 1,
                "deleted_registrations": 0,
                "connect_rest_api_error": 1,
            }
            # the second hour: use-c came and went; use-a and use-b de-registered at the end of the block
            assert (second["full_registrations"], second["deleted_registrations"]) == (1, 3)
            assert second["connect_rest_api_error"] == 1 and third["full_registrations"] == 0

            daily = await _get(
                http, f"/v3/metrics?include=full_registrations,connect_rest_api_success&interval=1d&{span}"
            )
            assert [e["full_registrations"] for e in daily["data"]] == [3]
            assert daily["data"][0]["connect_rest_api_success"] >= 1  # the hourly read above, at least
            assert set(daily["data"][0]) == {"id", "timestamp", "full_registrations", "connect_rest_api_success"}
            alias = await _get(http, f"/v3/metrics?include=device_server_rest_api_error&interval=1d&{span}")
            assert alias["data"][0]["device_server_rest_api_error"] == 2

            # paged by metric id, both ways; the period up to now
            one = await _get(http, f"/v3/metrics?include=full_registrations&interval=1h&{span}&limit=2")
            assert one["has_more"] is True and len(one["data"]) == 2
            rest = await _get(
                http, f"/v3/metrics?include=full_registrations&interval=1h&{span}&after={one['data'][1]['id']}"
            )
            assert [e["timestamp"] for e in rest["data"]] == [rfc3339(hour + 7200)]
            down = await _get(http, f"/v3/metrics?include=full_registrations&interval=1h&{span}&order=DESC")
            assert [e["full_registrations"] for e in down["data"]] == [0, 1, 2]
            recent = await _get(http, "/v3/metrics?include=full_registrations&interval=1h&period=2h")
            assert [e["full_registrations"] for e in recent["data"]] == [2, 1]  # this hour and the one before
            assert await _get(http, "/v3/metrics?include=full_registrations&interval=1d&start=20270115&end=20270116")

            for query, field in [
                (f"include=colour&interval=1h&{span}", "colour"),
                (f"interval=1h&{span}", "include"),
                (f"include=full_registrations&{span}", "interval"),
                (f"include=full_registrations&interval=5m&{span}", "interval"),
                ("include=full_registrations&interval=1h", "period"),
                (f"include=full_registrations&interval=1h&start={rfc3339(hour)}", "end"),
                (f"include=full_registrations&interval=1h&start={rfc3339(hour)}&end={rfc3339(hour)}", "end"),
                ("include=full_registrations&interval=1h&start=yesterday&end=today", "start"),
                ("include=full_registrations&interval=1h&period=99999w", "interval"),
                (f"include=full_registrations&interval=1h&{span}&order=up", "order"),
            ]:
                body = await _get(http, f"/v3/metrics?{query}", 400)
                assert body["object"] == "error" and field in str(body), (query, body)
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}") as anonymous:
                async with anonymous.get(f"/v3/metrics?include=full_registrations&interval=1h&{span}") as r:
                    assert r.status == 401

    run(scenario(), timeout=60)


# what the official SDK's `list_metrics()` asks for without `include` (mbed_cloud/connect/metric.py)
PELION = (
    "handshakes_successful,transactions,device_observations,connect_rest_api_success,connect_rest_api_error,"
    "device_proxy_request_success,device_proxy_request_error,device_subscription_request_success,"
    "device_subscription_request_error,bootstraps_successful,bootstraps_failed,bootstraps_pending,"
    "full_registrations,registration_updates,expired_registrations,deleted_registrations"
)


def test_transactions_and_registered_devices(tmp_path: Path, store_url: str) -> None:
    """issue 32 #3: each notification received and each request sent to a device is a transaction (a notification
    a device observation; a request a proxy or subscription request, by outcome); registered_devices is the
    directory's count of the account's registered devices, sampled."""

    async def scenario() -> None:
        span = "period=2h"  # this hour and the last, one interval: whenever the hour turns (real clock: the requests)
        async with running_node(tmp_path, redis_url=store_url) as node:
            async with (
                device(node, "tx-a", flavor="oma") as sim,
                device(node, "tx-b"),
                websocket_app(node) as (
                    http,
                    events,
                ),
            ):
                device_id = sim.device_id or ""
                async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700") as r:
                    assert r.status == 202, await r.text()
                    subscribed = (await r.json())["async-response-id"]
                await events.wait_for("async-responses", lambda e: e["id"] == subscribed)
                sim.set_value("/3303/0/5700", 31.5)
                await events.wait_for("notifications", lambda e: e["path"] == "/3303/0/5700")
                for async_id, uri in (("ok", "/3/0/0"), ("missing", "/3/0/99")):
                    body = {"method": "GET", "uri": uri}
                    async with http.post(f"/v2/device-requests/{device_id}?async-id={async_id}", json=body) as r:
                        assert r.status == 202, await r.text()
                    await events.wait_for("async-responses", lambda e, i=async_id: e["id"] == i)

                metrics = await _get(http, f"/v3/metrics?include={PELION},registered_devices&interval=2h&{span}")
                [entry] = metrics["data"]
                assert entry["registered_devices"] == 2
                assert (entry["device_proxy_request_success"], entry["device_proxy_request_error"]) == (1, 1)
                assert (entry["device_subscription_request_success"], entry["device_subscription_request_error"]) == (
                    1,
                    0,
                )
                # the observe's first value and the change, at least (a device may notify its value again)
                assert entry["device_observations"] >= 2
                assert entry["transactions"] == entry["device_observations"] + 3  # and the three requests
                assert (entry["handshakes_successful"], entry["bootstraps_pending"]) == (0, 0)  # plain CoAP here
                assert set(entry) == {"id", "timestamp", "registered_devices", *PELION.split(",")}
            async with _session(node) as http:
                later = await _get(http, f"/v3/metrics?include=registered_devices&interval=2h&{span}")
            assert later["data"][0]["registered_devices"] == 0  # sampled again: both de-registered

    run(scenario(), timeout=60)


def test_a_dtls_handshake_with_an_accounts_psk_is_counted_for_that_account(tmp_path: Path) -> None:
    """issue 32 #3 handshakes_successful: each DTLS handshake the LwM2M listener authenticates, by the credential's
    account."""
    name, key = "metrics-handshake-0001", bytes(range(16))

    async def scenario() -> None:
        async with running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=free_udp_port()) as node:
            account = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(account, name, key.hex())
            assert node.coaps_port is not None
            credentials = ClientCredentials(psk_identity=name, psk_key=key)
            sim = SimDevice(SystemClock(), ("127.0.0.1", node.coaps_port), name, security=credentials)
            await sim.start(lifecycle=False)
            try:
                assert sim.dtls is not None
                await sim.dtls.handshake()
            finally:
                await sim.stop(deregister=False)
            await flush_usage(node.store, node.lwm2m.registry.usage)
            hours = await node.store.get_usage(account, 0, 4e9)
            assert sum(counts.get("handshakes_successful", 0) for counts in hours.values()) == 1

    run(scenario(), timeout=60)
