"""A real third-party LwM2M client updated by a campaign (issue 33, Must show): AVSystem Anjay's demo against a real
`devicehub serve`, its object 5 given a package made the way Anjay's test framework makes them (tests/support/anjay.py)
— pulled over CoAP, pulled over CoAPS with the device's own PSK, and pushed in Block1 blocks — reboots into it
(the demo execs the package) and reports Update Result 1: the campaign says deployed. A package whose
force_error_case is FailedUpdate fails its Update on the device (Update Result 8): the campaign says failed, with
5.xml's words. Skipped, saying how to build it, where the demo is not built (it is not part of CI's image)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.anjay import (
    FAILED_UPDATE,
    anjay_demo_binary,
    firmware_package,
    manifest_for,
    reboot_script,
    start_demo,
    stop_demo,
)
from support.firmware_api import upload
from support.ports import free_udp_port
from support.service import ServiceProcess
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

KEY = "anjay-device-key-sixteen"  # the demo's --key-as-string; the REST API takes it in hex


@pytest.fixture(scope="module")
def demo() -> str:
    return anjay_demo_binary()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, demo: str) -> Iterator[ServiceProcess]:
    """One `devicehub serve --dev` (plain CoAP allowed) with a DTLS listener; each test has devices of its own."""
    process = ServiceProcess(
        data_dir=tmp_path_factory.mktemp("anjay") / "data",
        extra_args=("--coaps-port", str(free_udp_port()), "--firmware-check-interval", "0.2"),
    ).start()
    try:
        yield process
    finally:
        process.stop()


def _coaps_port(service: ServiceProcess) -> int:
    args = service.extra_args
    return int(args[args.index("--coaps-port") + 1])


def _campaign(service: ServiceProcess, endpoint_name: str, package: bytes, delivery: str) -> dict[str, Any]:
    """A campaign of this one device to `package`, started; the device's metadata once the campaign stopped."""
    upload(service, "/v3/firmware-images", package)
    manifest = upload(service, "/v3/firmware-manifests", manifest_for(package))
    body = {"device_filter": f"endpoint_name={endpoint_name}", "root_manifest_id": manifest["id"], "delivery": delivery}
    status, campaign = service.api("POST", "/v3/update-campaigns", body)
    assert status == 201, campaign
    path = f"/v3/update-campaigns/{campaign['id']}"
    assert service.api("POST", f"{path}/start")[0] == 202

    def stopped() -> bool:
        return bool(service.api("GET", path)[1]["phase"] == "stopped")

    wait_until(stopped, within=90, what=f"campaign of {endpoint_name} stopped", every=0.3)
    status, devices = service.api("GET", f"{path}/campaign-device-metadata")
    assert status == 200 and len(devices["data"]) == 1, devices
    found: dict[str, Any] = devices["data"][0]
    return found


def _demo_args(service: ServiceProcess, name: str, transport: str, tmp_path: Path) -> list[str]:
    marker = ["--fw-updated-marker-path", str(tmp_path / "fw-updated")]  # the demo's persistence file of object 5
    if transport == "coap":
        return ["-e", name, "-u", service.coap_uri, "-s", "nosec", "-l", "60", *marker]
    status, body = service.api(
        "POST", "/v2/device-shared-keys", {"endpoint_name": name, "secret_hex": KEY.encode().hex()}
    )
    assert status == 201, body
    uri = f"coaps://127.0.0.1:{_coaps_port(service)}"
    return [
        "-e",
        name,
        "-u",
        uri,
        "-s",
        "psk",
        "--identity-as-string",
        name,
        "--key-as-string",
        KEY,
        "-l",
        "60",
        *marker,
    ]


def _update(
    service: ServiceProcess, demo: str, tmp_path: Path, transport: str, delivery: str, package: bytes
) -> tuple[dict[str, Any], str]:
    name = f"anjay-{transport}-{delivery}-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "demo.log"
    process = start_demo(demo, *_demo_args(service, name, transport, tmp_path), log=log)
    try:
        wait_until(lambda: service.device_named(name), within=30, what=f"{name} registered")
        device = _campaign(service, name, package, delivery)
    finally:
        stop_demo(process)
    return device, log.read_text(errors="replace")


@pytest.mark.parametrize(("transport", "delivery"), [("coap", "pull"), ("coaps", "pull"), ("coap", "push")])
def test_anjay_is_updated_by_a_campaign(
    service: ServiceProcess, demo: str, tmp_path: Path, transport: str, delivery: str
) -> None:
    package = firmware_package(reboot_script(demo))
    device, log = _update(service, demo, tmp_path, transport, delivery, package)
    assert device["deployment_state"] == "deployed", (device, log)
    assert device["update_result"] == 1, device
    assert "*** FIRMWARE UPDATE" in log, log  # the demo executed the package: it rebooted into it
    assert len(package) > 8 * 1024  # more than one block of the largest size (RFC 7959 §2.2: SZX 6, 1 KiB)
    if delivery == "pull":  # it downloaded from the file server over the device's own transport and session
        port = service.coap_port if transport == "coap" else _coaps_port(service)
        assert f"download started: {transport}://127.0.0.1:{port}/fw/" in log, log
    else:  # it took the package from the Write of /5/0/0 in Block1 blocks
        assert f"write finished, {len(package)} B written" in log, log


def test_anjays_failed_update_is_reported_as_failed(service: ServiceProcess, demo: str, tmp_path: Path) -> None:
    package = firmware_package(reboot_script(demo), force_error=FAILED_UPDATE)
    device, log = _update(service, demo, tmp_path, "coap", "pull", package)
    assert device["deployment_state"] == "failed_connector_channel_update", (device, log)
    assert device["update_result"] == 8, device
    assert "update failed" in log, log  # the demo's own words for its forced failure
