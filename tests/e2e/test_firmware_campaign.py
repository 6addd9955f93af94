"""Firmware update end to end (issue 33 #5): a real `devicehub serve` process, 50 simulated devices with object 5 from
one `devicehub simulate` command, and the official SDK's UpdateAPI (mbed-cloud-sdk 2.2.0) adding the image, the
manifest made by manifest-tool and the campaign, starting it and listing the device states, unchanged. Every device
reboots half-way through its download and resumes at its offset (counted by the file server); a failing rollout
stops itself by the halt rule within its first wave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.apps import simulator, stop
from support.firmware_api import IMAGE, MANIFEST, firmware_counter, upload
from support.service import ServiceProcess
from support.waiting import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning"),  # the SDK's own
]

COUNT = 50
BLOCKS = IMAGE.stat().st_size // 1024


def _update_api(service: ServiceProcess) -> Any:
    from mbed_cloud import UpdateAPI  # imported here so the SDK's import-time warnings fall under the marks

    return UpdateAPI({"api_key": service.api_key, "host": service.base_url})


@pytest.fixture
def fota_service(tmp_path: Path) -> Any:
    process = ServiceProcess(data_dir=tmp_path / "data", extra_args=("--firmware-check-interval", "0.2")).start()
    try:
        yield process
    finally:
        process.stop()


def test_the_sdk_updates_fifty_devices_that_resume_their_downloads(fota_service: ServiceProcess) -> None:
    service = fota_service
    devices = simulator(
        service.coap_uri, "--count", str(COUNT), "--prefix", "fw-", "--endpoint-type", "fw-fleet", "--flavor", "oma",
        "--rate", "0", "--firmware", "--firmware-reboot-at", "0.5",
    )  # fmt: skip
    try:
        service.registered_devices(COUNT, within=30)
        api = _update_api(service)
        image = api.add_firmware_image(name="fw 1.2.3", datafile=str(IMAGE))
        assert image.datafile_size == IMAGE.stat().st_size
        manifest = api.add_firmware_manifest(name="manifest 1.2.3", datafile=str(MANIFEST))
        # a field the SDK names as the API does: its start_campaign sends the filter it read back through its own
        # formatter again, which refuses API names that differ from its own (`endpoint_type` for its `device_type`)
        campaign = api.add_campaign(name="rollout", device_filter={"state": "registered"}, manifest_id=manifest.id)
        assert campaign.phase == "draft"
        api.start_campaign(campaign)

        def finished() -> Any:
            found = api.get_campaign(campaign.id)
            return found if found.phase == "stopped" else None

        done = wait_until(finished, within=120, what="the campaign finishes", every=0.5)
        assert done.state == "deployed", done.state
        states = list(api.list_campaign_device_states(campaign.id))
        assert len(states) == COUNT and {s.state for s in states} == {"deployed"}
        # the file server served each device's image once: one start from byte 0 each, no block twice, although
        # every device rebooted half-way and registered again
        assert firmware_counter(service, "first_blocks") == COUNT
        assert firmware_counter(service, "blocks") == COUNT * BLOCKS
        assert firmware_counter(service, "devices_succeeded") == COUNT
    finally:
        stop(devices)


def test_a_failing_rollout_halts_in_its_first_wave(fota_service: ServiceProcess) -> None:
    service = fota_service
    devices = simulator(
        service.coap_uri, "--count", str(COUNT), "--prefix", "fw-", "--endpoint-type", "fw-fleet", "--flavor", "oma",
        "--rate", "0", "--firmware", "--firmware-corrupt-percent", "30",
    )  # fmt: skip
    try:
        service.registered_devices(COUNT, within=30)
        upload(service, "/v3/firmware-images", IMAGE.read_bytes())  # each answers 201 with the record
        manifest = upload(service, "/v3/firmware-manifests", MANIFEST.read_bytes())
        status, campaign = service.api(
            "POST",
            "/v3/update-campaigns",
            {
                "device_filter": "endpoint_type=fw-fleet",
                "root_manifest_id": manifest["id"],
                "halt_failure_percent": 5,
                "halt_min_finished": 10,
                "max_starts_per_minute": 25,  # the first wave: 25 devices in the first minute
            },
        )
        assert status == 201, campaign
        assert service.api("POST", f"/v3/update-campaigns/{campaign['id']}/start")[0] == 202

        def stopped() -> Any:
            found = service.api("GET", f"/v3/update-campaigns/{campaign['id']}")[1]
            return found if found["phase"] == "stopped" else None

        done = wait_until(stopped, within=60, what="the campaign halts", every=0.3)
        assert done["state"] == "autostopped" and done["autostop_reason"].startswith("halted: "), done
        _, metrics = service.api("GET", f"/v3/update-campaigns/{campaign['id']}/metrics")
        assert metrics["failed_count"] >= 1 and metrics["skipped_count"] >= COUNT - 25, metrics
    finally:
        stop(devices)
