"""A campaign's phases and its devices' states as `FirmwareUpdateEvent`s (issue 33): the `firmware-updates` array of
the channels that opted in (`cfg.include_firmware_updates`) and lines in the console's feed."""

from __future__ import annotations

from devicehub.domain.events import FirmwareUpdateEvent
from devicehub.domain.firmware.rules import SKIPPED_STEP
from devicehub.domain.firmware_model import Campaign, CampaignDevice


def firmware_event(campaign: Campaign, device: CampaignDevice | None = None) -> FirmwareUpdateEvent:
    """The campaign's phase (and why it stopped, when it did), or the device's state and reason: `skipped` for a
    device the campaign stopped before it started (Pelion keeps it `pending`; the statistics count it skipped)."""
    if device is None:
        return FirmwareUpdateEvent(campaign_id=campaign.id, phase=campaign.phase, reason=campaign.autostop_reason)
    return FirmwareUpdateEvent(
        campaign_id=campaign.id,
        phase=campaign.phase,
        device_id=device.device_id,
        endpoint_name=device.endpoint_name,
        deployment_state=SKIPPED_STEP if device.step == SKIPPED_STEP else device.deployment_state,
        reason=device.reason,
    )
