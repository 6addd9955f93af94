"""The official Pelion Python SDK (mbed-cloud-sdk 2.2.0, `mbed_cloud.ConnectAPI`) runs its connect flows
unchanged against devicehub: list connected devices, list resources, get and set a value, subscribe with a
callback (its notifications come over the pull channel), presubscriptions (issue 6)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from support.apps import simulator, stop
from support.service import ServiceProcess
from support.waiting import wait_until

pytestmark = [
    pytest.mark.e2e,
    # the SDK announces its beta modules and uses old APIs; those warnings are its own, not ours
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning"),
]


def _connect_api(service: ServiceProcess) -> Any:
    from mbed_cloud import ConnectAPI  # imported here so the SDK's import-time warnings fall under the marks

    return ConnectAPI({"api_key": service.api_key, "host": service.base_url})


def _start_notifications(api: Any, service: ServiceProcess) -> None:
    """The SDK's own `start_notifications()`, then wait for its thread's first long poll to create the pull
    channel. The SDK starts that thread and sends its first device request at once; the wire format creates
    the pull channel at the first GET (wire-format.md), and an answer published before it is not stored for
    the key. A simulator on localhost answers within a millisecond, sooner than the thread's first GET at times
    (the request then waits out the SDK's 20 s); a device over a network does not."""
    api.start_notifications()
    wait_until(lambda: service.delivery_mechanism() == "LONG_POLLING", within=10, what="the SDK's pull channel")


def _wait(condition: threading.Event, what: str) -> None:
    assert condition.wait(20), f"{what} did not happen"


def test_connect_api_flows_work_unchanged(service: ServiceProcess) -> None:
    devices_process = simulator(service.coap_uri, "--count", "2", "--prefix", "sdk-", "--rate", "2")
    api = _connect_api(service)
    try:
        # the directory is read through the SDK itself until both devices show up
        devices = wait_until(
            lambda: list(api.list_connected_devices()),
            accept=lambda found: len(found) == 2,
            within=20,
            what="both devices listed through the SDK",
            every=0.1,
        )
        assert sorted(d.name for d in devices) == ["sdk-0", "sdk-1"]
        assert all(d.state == "registered" for d in devices)
        device_id = next(d.id for d in devices if d.name == "sdk-0")

        paths = [r.path for r in api.list_resources(device_id)]
        assert "/3303/0/5700" in paths and "/3311/0/5851" in paths

        _start_notifications(api, service)
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


def test_foundation_device_update_delete_api_keys_and_a_failed_read(service: ServiceProcess) -> None:
    """issue 11: the SDK's own calls, unchanged: `Device.read()`/`.update()`/`.delete()` on `/v3/devices/{id}/`
    (trailing slash), `ApiKey.create()`/`.me()`/`.list()`/`.delete()`, and a read the device answers 4.04."""
    from mbed_cloud import SDK
    from mbed_cloud.exceptions import CloudAsyncError
    from mbed_cloud.sdk.exceptions import ApiErrorResponse

    devices_process = simulator(service.coap_uri, "--count", "1", "--prefix", "fnd-", "--rate", "0")
    sdk = SDK(api_key=service.api_key, host=service.base_url)
    api = _connect_api(service)
    try:
        found = wait_until(lambda: list(api.list_connected_devices()), within=20, what="the device listed", every=0.1)
        assert [d.name for d in found] == ["fnd-0"]
        device_id = found[0].id

        device = sdk.foundation.device(id=device_id).read()  # GET /v3/devices/{id}/
        assert device.endpoint_name == "fnd-0"
        device.name = "Boiler"
        device.description = "basement"
        device.custom_attributes = {"room": "b1"}
        device.update()  # PUT /v3/devices/{id}/ with every field read plus the three set
        again = sdk.foundation.device(id=device_id).read()
        assert (again.name, again.description, again.custom_attributes) == ("Boiler", "basement", {"room": "b1"})

        # the device answers 4.04: the SDK sees status 404 and no service-side error (not "4.04")
        _start_notifications(api, service)
        with pytest.raises(CloudAsyncError) as failed:
            api.get_resource_value_async(device_id, "/3/0/99").wait(20)
        assert failed.value.status == 404 and failed.value.reason is None

        key = sdk.foundation.api_key(name="sdk-made").create()  # POST /v3/api-keys → 201 with the secret
        assert key.key.startswith("ak_") and key.id
        developer = SDK(api_key=key.key, host=service.base_url)
        assert developer.foundation.api_key().me().id == key.id
        assert key.id in [k.id for k in sdk.foundation.api_key().list()]
        sdk.foundation.api_key(id=key.id).delete()  # DELETE /v3/api-keys/{id} → 204
        assert key.id not in [k.id for k in sdk.foundation.api_key().list()]

        sdk.foundation.device(id=device_id).delete()  # DELETE /v3/devices/{id}/
        with pytest.raises(ApiErrorResponse) as gone:
            sdk.foundation.device(id=device_id).read()
        assert gone.value.status_code == 404
    finally:
        api.stop_notifications()
        stop(devices_process)


def test_device_directory_events(service: ServiceProcess) -> None:
    """issue 32 #3: `DeviceDirectoryAPI.list_device_events` (`GET /v3/devicelog/`, its filters in `filter=`) and
    `get_device_event` (`GET /v3/devicelog/{id}/`), unchanged."""
    from mbed_cloud import DeviceDirectoryAPI

    devices_process = simulator(service.coap_uri, "--count", "1", "--prefix", "log-", "--rate", "0")
    api = DeviceDirectoryAPI({"api_key": service.api_key, "host": service.base_url})
    try:
        events: list[Any] = wait_until(
            lambda: list(api.list_device_events()), within=20, what="the device's registered event"
        )
        assert [(e.event_type, e.state_change) for e in events] == [("registered", True)]
        device_id = events[0].device_id
        assert events[0].date_time is not None and events[0].event_type_category == "DEVICE_REGISTRATION"
        filtered = list(api.list_device_events(filters={"device_id": {"$eq": device_id}}, order="desc", limit=5))
        assert [e.id for e in filtered] == [events[0].id]
        assert list(api.list_device_events(filters={"event_type": {"$eq": "deregistered"}})) == []
        assert api.get_device_event(events[0].id).device_id == device_id
    finally:
        stop(devices_process)


def test_device_directory_queries(service: ServiceProcess) -> None:
    """issue 32 #3: `add_query`, `list_queries`, `get_query`, `update_query` and `delete_query` of
    `DeviceDirectoryAPI` (`/v3/device-queries/`), unchanged."""
    from mbed_cloud import DeviceDirectoryAPI

    api = DeviceDirectoryAPI({"api_key": service.api_key, "host": service.base_url})
    made = api.add_query(name="live sensors", filter={"state": {"$eq": "registered"}, "device_type": {"$eq": "s"}})
    assert made.name == "live sensors" and made.id and made.created_at is not None
    # sent as `state=registered&endpoint_type=s` (the SDK renames device_type on the way out, not back)
    assert made.filter == {"state": {"$eq": "registered"}, "endpoint_type": {"$eq": "s"}}
    listed = list(api.list_queries())
    assert [(q.id, q.name) for q in listed] == [(made.id, "live sensors")]
    assert api.get_query(made.id).filter == made.filter
    renamed = api.update_query(made.id, name="sensors")
    assert (renamed.name, renamed.filter) == ("sensors", made.filter)
    api.delete_query(made.id)
    assert list(api.list_queries()) == []


def test_statistics_metrics(service: ServiceProcess) -> None:
    """issue 32 #3: `ConnectAPI.list_metrics` (`GET /v3/metrics`, the statistics API), unchanged: with an explicit
    include, and with none (the SDK then asks for every metric of Pelion's statistics API)."""
    devices_process = simulator(service.coap_uri, "--count", "2", "--prefix", "met-", "--rate", "0")
    api = _connect_api(service)
    include = ["full_registrations", "updated_registrations", "deleted_registrations", "expired_registrations"]
    try:

        def registered() -> list[Any]:
            metrics = list(api.list_metrics(include=[*include, "failed_api_calls"], interval="1d", period="1d"))
            return metrics if sum(m.full_registrations for m in metrics) == 2 else []

        metrics = wait_until(registered, within=20, what="two full registrations counted")
        assert len(metrics) == 1 and metrics[0].timestamp is not None and metrics[0].id
        assert (metrics[0].deleted_registrations, metrics[0].failed_api_calls) == (0, 0)
        hourly = list(api.list_metrics(include=include, interval="1h", period="3h"))
        assert [m.full_registrations for m in hourly][-1] == 2 and len(hourly) == 3
        [everything] = api.list_metrics(interval="2d", period="2d")  # no include: all of them
        assert everything.full_registrations == 2 and everything.successful_api_calls >= 3
        assert (everything.transactions, everything.handshakes, everything.pending_bootstraps) == (0, 0, 0)
    finally:
        stop(devices_process)
