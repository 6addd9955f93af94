"""The official Pelion Python SDK (mbed-cloud-sdk 2.2.0, `mbed_cloud.ConnectAPI`) runs its connect flows
unchanged against devicehub: list connected devices, list resources, get and set a value, subscribe with a
callback (its notifications come over the pull channel), presubscriptions (issue 6)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from support.apps import simulator, stop
from support.service import ServiceProcess

pytestmark = [
    pytest.mark.e2e,
    # the SDK announces its beta modules and uses old APIs; those warnings are its own, not ours
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning"),
]


def _connect_api(service: ServiceProcess) -> Any:
    from mbed_cloud import ConnectAPI  # imported here so the SDK's import-time warnings fall under the marks

    return ConnectAPI({"api_key": service.api_key, "host": service.base_url})


def _wait(condition: threading.Event, what: str) -> None:
    assert condition.wait(20), f"{what} did not happen"


def test_connect_api_flows_work_unchanged(service: ServiceProcess) -> None:
    devices_process = simulator(service.coap_uri, "--count", "2", "--prefix", "sdk-", "--rate", "2")
    api = _connect_api(service)
    try:
        registered = threading.Event()

        def two_devices() -> list[Any]:
            found = list(api.list_connected_devices())
            if len(found) == 2:
                registered.set()
            return found

        devices: list[Any] = []
        for _ in range(200):  # the directory is read through the SDK itself until both devices show up
            devices = two_devices()
            if registered.wait(0.1):
                break
        assert sorted(d.name for d in devices) == ["sdk-0", "sdk-1"]
        assert all(d.state == "registered" for d in devices)
        device_id = next(d.id for d in devices if d.name == "sdk-0")

        paths = [r.path for r in api.list_resources(device_id)]
        assert "/3303/0/5700" in paths and "/3311/0/5851" in paths

        assert api.get_resource_value(device_id, "/3/0/0") == "devicehub"
        api.set_resource_value(device_id, "/3311/0/5851", "42")
        assert str(api.get_resource_value(device_id, "/3311/0/5851")) == "42"

        values: list[Any] = []
        arrived = threading.Event()

        def on_value(device: str, path: str, value: Any) -> None:
            values.append((device, path, value))
            arrived.set()

        api.add_resource_subscription_async(device_id, "/3303/0/5700", on_value)
        _wait(arrived, "a subscribed value")
        assert values[0][0] == device_id and values[0][1] == "/3303/0/5700"
        float(values[0][2].decode() if isinstance(values[0][2], bytes) else values[0][2])

        api.update_presubscriptions([{"device_id": "sdk-*", "resource_paths": ["/3/0/9"]}])
        rules = api.list_presubscriptions()
        assert [(r.device_id, r.resource_paths) for r in rules] == [("sdk-*", ["/3/0/9"])]
        api.delete_presubscriptions()
        assert api.list_presubscriptions() == []
    finally:
        api.stop_notifications()
        stop(devices_process)
