"""Firmware images (metadata and their bytes), manifests, campaigns and campaign devices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.firmware_model import Campaign, CampaignDevice, FirmwareImage, FirmwareManifest


class FirmwareStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written. An image's bytes are written in parts
    (`append_image_data`) before its record (`put_firmware_image`), so a listed image always has all its bytes; bytes
    whose record never came are removed by `delete_image_data` (the upload's own clean-up)."""

    # ---- images ----------------------------------------------------------------------------------------
    async def append_image_data(self, account_id: str, image_id: str, offset: int, data: bytes) -> None:
        """Write `data` at `offset` of the image's bytes (parts come in order, from offset 0)."""

    async def read_image_data(self, account_id: str, image_id: str, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset` (fewer at the end; empty past it or for an unknown image)."""

    async def delete_image_data(self, account_id: str, image_id: str) -> None: ...
    async def put_firmware_image(self, image: FirmwareImage) -> None: ...
    async def get_firmware_image(self, account_id: str, image_id: str) -> FirmwareImage | None: ...
    async def list_firmware_images(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[FirmwareImage]:
        """Ordered by id; `after` is an exclusive id cursor."""

    async def delete_firmware_image(self, account_id: str, image_id: str) -> bool:
        """The record and its bytes; False when the account has no such image."""

    # ---- manifests -------------------------------------------------------------------------------------
    async def put_firmware_manifest(self, manifest: FirmwareManifest) -> None: ...
    async def get_firmware_manifest(self, account_id: str, manifest_id: str) -> FirmwareManifest | None: ...
    async def list_firmware_manifests(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[FirmwareManifest]: ...
    async def delete_firmware_manifest(self, account_id: str, manifest_id: str) -> bool: ...

    # ---- campaigns -------------------------------------------------------------------------------------
    async def put_campaign(self, campaign: Campaign) -> None: ...
    async def get_campaign(self, account_id: str, campaign_id: str) -> Campaign | None: ...
    async def list_campaigns(self, account_id: str, *, after: str | None = None, limit: int = 50) -> list[Campaign]: ...
    async def running_campaigns(self) -> list[Campaign]:
        """Every account's campaigns in a phase the engine works on (starting, active, stopping)."""

    async def delete_campaign(self, account_id: str, campaign_id: str) -> bool:
        """The campaign and its devices; False when the account has no such campaign."""

    async def start_campaign_devices(self, campaign: Campaign, devices: Sequence[CampaignDevice]) -> None:
        """Store the campaign (its new phase) and its devices together: a campaign is never active without them."""

    async def put_campaign_device(self, account_id: str, device: CampaignDevice) -> None: ...
    async def get_campaign_device(self, account_id: str, campaign_id: str, device_id: str) -> CampaignDevice | None:
        """One device of the campaign (the node a device's update was handed to reads where it stands)."""

    async def list_campaign_devices(
        self, account_id: str, campaign_id: str, *, after: str | None = None, limit: int = 1000
    ) -> list[CampaignDevice]:
        """Ordered by device id; `after` is an exclusive device-id cursor."""
