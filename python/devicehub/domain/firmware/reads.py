"""What the campaign engine reads of a campaign from the store: all its devices, and the image its manifest names."""

from __future__ import annotations

from devicehub.domain.firmware.catalog import FirmwareCatalog
from devicehub.domain.firmware_model import Campaign, CampaignDevice, FirmwareImage
from devicehub.domain.storage.store import Store

PAGE = 1000


async def all_devices(store: Store, campaign: Campaign) -> list[CampaignDevice]:
    devices: list[CampaignDevice] = []
    after: str | None = None
    while True:
        page = await store.list_campaign_devices(campaign.account_id, campaign.id, after=after, limit=PAGE)
        devices += page
        if len(page) < PAGE:
            return devices
        after = page[-1].device_id


async def campaign_image(store: Store, catalog: FirmwareCatalog, campaign: Campaign) -> FirmwareImage | None:
    """The image of the campaign's manifest; None when the manifest or its image is gone (the campaign stops)."""
    manifest = await store.get_firmware_manifest(campaign.account_id, campaign.root_manifest_id)
    if manifest is None:
        return None
    try:
        return await catalog.image_for(campaign.account_id, manifest)
    except Exception:
        return None
