"""Firmware images, manifests, campaigns and campaign devices on both stores (issue 33 #1, #2)."""

from __future__ import annotations

import hashlib

from devicehub.domain.firmware_model import (
    ACTIVE,
    DRAFT,
    STOPPED,
    Campaign,
    CampaignDevice,
    FirmwareImage,
    FirmwareManifest,
    ParsedManifest,
)
from devicehub.domain.storage.store import Store
from support.stores import StoreFactory, reopen, run

A, B = "a" * 32, "b" * 32


def image(image_id: str, account: str = A, size: int = 0) -> FirmwareImage:
    return FirmwareImage(
        id=image_id,
        account_id=account,
        name=image_id,
        datafile_checksum="0" * 64,
        datafile_size=size,
        created_at=1.0,
        updated_at=1.0,
    )


def campaign(campaign_id: str, phase: str = DRAFT, account: str = A) -> Campaign:
    return Campaign(
        id=campaign_id,
        account_id=account,
        name=campaign_id,
        device_filter="endpoint_type=x",
        root_manifest_id="m1",
        phase=phase,
        created_at=1.0,
        updated_at=1.0,
    )


def campaign_device(campaign_id: str, device_id: str, state: str = "pending") -> CampaignDevice:
    return CampaignDevice(
        campaign_id=campaign_id,
        device_id=device_id,
        endpoint_name=f"ep-{device_id}",
        deployment_state=state,
        created_at=1.0,
        updated_at=1.0,
    )


def test_image_bytes_are_written_in_parts_and_read_at_any_offset(make_store: StoreFactory) -> None:
    body = bytes(range(256)) * 300  # 76 800 bytes in parts of 64 KiB and less

    async def scenario(store: Store) -> None:
        for offset in range(0, len(body), 65536):
            await store.append_image_data(A, "i1", offset, body[offset : offset + 65536])
        await store.put_firmware_image(image("i1", size=len(body)))
        assert await store.read_image_data(A, "i1", 0, 1024) == body[:1024]
        assert await store.read_image_data(A, "i1", 70000, 1024) == body[70000:71024]
        assert await store.read_image_data(A, "i1", len(body) - 10, 1024) == body[-10:]  # fewer at the end
        assert await store.read_image_data(A, "i1", len(body) + 5, 1024) == b""
        assert await store.read_image_data(A, "nope", 0, 1024) == b""
        assert await store.read_image_data(B, "i1", 0, 16) == b""  # another account's image is not there

    run(make_store, scenario)

    async def check(store: Store) -> None:
        got = bytearray()
        while len(got) < len(body):
            got += await store.read_image_data(A, "i1", len(got), 4096)
        assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()

    reopen(make_store, check)


def test_deleting_an_image_removes_its_record_and_bytes_only_in_its_account(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.append_image_data(A, "i1", 0, b"abc")
        await store.put_firmware_image(image("i1", size=3))
        await store.put_firmware_image(image("i2"))
        assert not await store.delete_firmware_image(B, "i1")
        assert [i.id for i in await store.list_firmware_images(A)] == ["i1", "i2"]
        assert [i.id for i in await store.list_firmware_images(A, after="i1")] == ["i2"]
        assert await store.delete_firmware_image(A, "i1")
        assert await store.get_firmware_image(A, "i1") is None
        assert await store.read_image_data(A, "i1", 0, 3) == b""
        assert not await store.delete_firmware_image(A, "i1")

    run(make_store, scenario)


def test_manifests_are_kept_per_account(make_store: StoreFactory) -> None:
    parsed = ParsedManifest(
        manifest_version=3,
        vendor_id="00",
        class_id="11",
        update_priority=1,
        component_name="MAIN",
        payload_version="1.2.3",
        payload_digest="0" * 64,
        payload_size=3,
        payload_uri="coap://x/y",
        payload_format="raw-binary",
        signature_size=64,
    )
    manifest = FirmwareManifest(
        id="m1", account_id=A, name="m", datafile=b"\x30\x00", parsed=parsed, created_at=1.0, updated_at=1.0
    )

    async def scenario(store: Store) -> None:
        await store.put_firmware_manifest(manifest)
        assert await store.get_firmware_manifest(A, "m1") == manifest
        assert await store.get_firmware_manifest(B, "m1") is None
        assert await store.list_firmware_manifests(A) == [manifest]
        assert not await store.delete_firmware_manifest(B, "m1")
        assert await store.delete_firmware_manifest(A, "m1")
        assert await store.list_firmware_manifests(A) == []

    run(make_store, scenario)


def test_a_started_campaign_is_stored_with_its_devices_and_found_while_running(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_campaign(campaign("c1"))
        await store.put_campaign(campaign("c2", account=B))
        assert await store.running_campaigns() == []
        started = campaign("c1", ACTIVE)
        await store.start_campaign_devices(started, [campaign_device("c1", d) for d in ("d2", "d1", "d3")])
        assert [c.id for c in await store.running_campaigns()] == ["c1"]
        assert [d.device_id for d in await store.list_campaign_devices(A, "c1")] == ["d1", "d2", "d3"]
        assert [d.device_id for d in await store.list_campaign_devices(A, "c1", after="d1", limit=1)] == ["d2"]
        await store.put_campaign_device(A, campaign_device("c1", "d2", "deployed"))
        states = {d.device_id: d.deployment_state for d in await store.list_campaign_devices(A, "c1")}
        assert states == {"d1": "pending", "d2": "deployed", "d3": "pending"}
        found = await store.get_campaign_device(A, "c1", "d2")
        assert found is not None and found.deployment_state == "deployed"
        assert await store.get_campaign_device(A, "c1", "d9") is None
        assert await store.get_campaign_device(A, "c9", "d2") is None

    run(make_store, scenario)

    async def check(store: Store) -> None:
        assert [c.id for c in await store.running_campaigns()] == ["c1"]  # a restart finds it to go on with
        await store.put_campaign(campaign("c1", STOPPED))
        assert await store.running_campaigns() == []
        assert [c.id for c in await store.list_campaigns(A)] == ["c1"]
        assert await store.delete_campaign(A, "c1")
        assert await store.list_campaign_devices(A, "c1") == []
        assert not await store.delete_campaign(A, "c1")

    reopen(make_store, check)
