"""The firmware aggregates as every store keeps them: images, manifests, campaigns and each device's place in one."""

from __future__ import annotations

import msgspec

# Pelion's campaign phases (update-campaigns OpenAPI `phase`); the moves between them are phases.py's
DRAFT, STARTING, ACTIVE, STOPPING, STOPPED, ARCHIVED = "draft", "starting", "active", "stopping", "stopped", "archived"
RUNNING = (STARTING, ACTIVE, STOPPING)  # phases the campaign engine works on

# Pelion's `deployment_state` of a campaign device (CampaignDeviceMetadata)
PENDING = "pending"
UPDATED_CHANNEL = "updated_connector_channel"  # the package URI reached the device: it downloads and applies it
FAILED_CHANNEL = "failed_connector_channel_update"
DEPLOYED = "deployed"
DEREGISTERED = "deregistered"
SKIPPED = "skipped"  # devicehub: never started (the campaign stopped first); Pelion counts these as `skipped`


class FirmwareImage(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    account_id: str
    name: str
    description: str = ""
    datafile_checksum: str  # sha256, lowercase hex
    datafile_size: int
    created_at: float
    updated_at: float


class ParsedManifest(msgspec.Struct, frozen=True, kw_only=True):
    """What a manifest made by ARM's manifest-tool (schema v3) says (domain/firmware/manifest.py)."""

    manifest_version: int
    vendor_id: str  # hex
    class_id: str  # hex
    update_priority: int
    component_name: str
    payload_version: str
    payload_digest: str  # sha256, hex
    payload_size: int
    payload_uri: str
    payload_format: str
    signature_size: int


class FirmwareManifest(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    account_id: str
    name: str
    description: str = ""
    datafile: bytes  # the manifest itself (a few hundred bytes): kept in the record
    parsed: ParsedManifest
    created_at: float
    updated_at: float


class Campaign(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    account_id: str
    name: str
    description: str = ""
    device_filter: str
    root_manifest_id: str
    phase: str = DRAFT
    autostop: bool = False
    autostop_success_percent: float = 100.0
    autostop_reason: str = ""  # why it stopped by itself (autostop, halt rule) or could not start
    # opt-in rules beyond Pelion (issue 33 #3)
    halt_failure_percent: float | None = None  # stop when failures exceed this % of finished devices …
    halt_min_finished: int = 10  # … once at least this many finished
    max_starts_per_minute: int | None = None  # pace: device updates started per minute
    device_deadline_s: float | None = None  # a device not finished this long after its start counts as failed
    delivery: str = "pull"  # pull: Package URI /5/0/1 (the file server); push: Write of Package /5/0/0 (Block1)
    waves: tuple[float, ...] = ()  # rising percentages of the devices; the next starts when the last finished
    created_at: float
    updated_at: float
    started_at: float | None = None
    stopped_at: float | None = None
    archived_at: float | None = None


class CampaignDevice(msgspec.Struct, frozen=True, kw_only=True):
    """One device's place in a campaign: Pelion's `deployment_state`, plus where in object 5's process it is."""

    campaign_id: str
    device_id: str
    endpoint_name: str
    deployment_state: str = PENDING
    step: str = "queued"  # queued, downloading, updating, done
    reason: str = ""  # why it ended where it did, in words (a failure's Update Result named)
    update_result: int | None = None  # /5/0/5 as the device last reported it
    firmware_version: str = ""  # /3/0/3 after the update, when the device reports one
    started_at: float | None = None
    executed_at: float | None = None  # when Update /5/0/2 was executed (the device reboots after it)
    finished_at: float | None = None
    created_at: float
    updated_at: float
