"""Update campaigns (Pelion's update service): `/v3/update-campaigns[/{campaign_id}]` (POST, GET, PUT, DELETE, list),
`/start`, `/stop`, `/archive`, `/campaign-device-metadata`, `/metrics` and `/statistics`.

mbed-cloud-sdk 2.x starts a campaign with `PUT {"state": "scheduled"}` (its `start_campaign`), and may create one
already scheduled: both are the `/start` move. Opt-in fields beyond Pelion: `halt_failure_percent` with
`halt_min_finished` (stop when failures exceed X % of at least N finished devices), `max_starts_per_minute` (pace),
`device_deadline_seconds` (a device silent that long after its start fails) and `waves` (rising percentages of the
devices: the next wave starts when the last one's devices finished and the halt rule did not stop the campaign).
"""

from __future__ import annotations

import re

import msgspec
from aiohttp import web

from devicehub.api.body import decode, json_reply, page_query, read_body
from devicehub.api.context import principal, services
from devicehub.api.directory_filter import parse_filters
from devicehub.domain.firmware.campaigns import CampaignInput, Campaigns
from devicehub.domain.firmware.rules import Tally
from devicehub.domain.firmware_model import (
    ACTIVE,
    ARCHIVED,
    DRAFT,
    STARTING,
    STOPPED,
    STOPPING,
    Campaign,
    CampaignDevice,
)
from devicehub.domain.timefmt import rfc3339
from devicehub.errors import FieldError, Unavailable, ValidationFailed

MAX_BODY = 64 * 1024


class CampaignPostBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    device_filter: str
    name: str | None = None
    description: str | None = None
    root_manifest_id: str | None = None
    autostop: bool | None = None
    autostop_success_percent: float | None = None
    campaign_strategy: str | None = None  # one-shot only: devices matching later are not added
    approval_required: bool | None = None
    state: str | None = None  # SDK 2.x: draft, or scheduled to start at once
    when: str | None = None
    halt_failure_percent: float | None = None
    halt_min_finished: int | None = None
    max_starts_per_minute: int | None = None
    device_deadline_seconds: float | None = None
    delivery: str | None = None  # pull (default) or push
    waves: list[float] | None = None  # rising percentages, e.g. [1, 10, 100]


class CampaignPutBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    device_filter: str | None = None
    name: str | None = None
    description: str | None = None
    root_manifest_id: str | None = None
    autostop: bool | None = None
    autostop_success_percent: float | None = None
    approval_required: bool | None = None
    state: str | None = None
    when: str | None = None
    halt_failure_percent: float | None = None
    halt_min_finished: int | None = None
    max_starts_per_minute: int | None = None
    device_deadline_seconds: float | None = None
    delivery: str | None = None
    waves: list[float] | None = None


class CampaignModel(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "update-campaign"
    id: str
    name: str
    description: str
    device_filter: str
    root_manifest_id: str
    root_manifest_url: str
    phase: str
    state: str  # the legacy state (SDK 2.x), from the phase
    autostop: bool
    autostop_success_percent: float
    autostop_reason: str
    campaign_strategy: str = "one-shot"
    approval_required: bool = False
    halt_failure_percent: float | None
    halt_min_finished: int
    max_starts_per_minute: int | None
    device_deadline_seconds: float | None
    delivery: str
    waves: list[float]  # empty: one wave of every device
    created_at: str
    updated_at: str
    started_at: str | None
    stopped_at: str | None
    finished: str | None
    archived_at: str | None
    etag: str


class CampaignList(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "list"
    data: list[CampaignModel]
    has_more: bool
    limit: int
    order: str = "ASC"
    after: str | None = None
    total_count: int | None = None


class CampaignDeviceModel(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "update-campaign-device-metadata"
    id: str
    campaign: str
    device_id: str
    name: str
    description: str  # why it is where it is (a failure names its Update Result)
    deployment_state: str
    step: str
    update_result: int | None
    firmware_version: str
    mechanism: str = "connector"
    mechanism_url: str = ""
    created_at: str
    updated_at: str
    etag: str


class CampaignDeviceList(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "list"
    data: list[CampaignDeviceModel]
    has_more: bool
    limit: int
    order: str = "ASC"
    after: str | None = None
    total_count: int | None = None


class CampaignMetrics(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "update-campaign-metrics"
    total_count: int
    success_count: int
    failed_count: int
    skipped_count: int
    pending_count: int
    created_at: str


class SummaryStatus(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "summary_status"
    id: str  # success, fail, info, skipped
    campaign_id: str
    summary_status: str
    count: int
    created_at: str


class StatisticsList(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "list"
    data: list[SummaryStatus]
    has_more: bool = False
    total_count: int


def legacy_state(campaign: Campaign) -> str:
    if campaign.phase == STOPPED:
        reason = campaign.autostop_reason
        if reason.startswith(("halted", "autostopped")):
            return "autostopped"
        return "userstopped" if reason == "stopped by the user" else "deployed"
    return {DRAFT: "draft", STARTING: "publishing", ACTIVE: "deploying", STOPPING: "stopping", ARCHIVED: "deployed"}[
        campaign.phase
    ]


def _time(value: float | None) -> str | None:
    return None if value is None else rfc3339(value)


def campaign_model(request: web.Request, campaign: Campaign) -> CampaignModel:
    manifest_url = (
        f"{request.scheme}://{request.host}/v3/firmware-manifests/{campaign.root_manifest_id}/datafile"
        if campaign.root_manifest_id
        else ""
    )
    return CampaignModel(
        id=campaign.id,
        name=campaign.name,
        description=campaign.description,
        device_filter=campaign.device_filter,
        root_manifest_id=campaign.root_manifest_id,
        root_manifest_url=manifest_url,
        phase=campaign.phase,
        state=legacy_state(campaign),
        autostop=campaign.autostop,
        autostop_success_percent=campaign.autostop_success_percent,
        autostop_reason=campaign.autostop_reason,
        halt_failure_percent=campaign.halt_failure_percent,
        halt_min_finished=campaign.halt_min_finished,
        max_starts_per_minute=campaign.max_starts_per_minute,
        device_deadline_seconds=campaign.device_deadline_s,
        delivery=campaign.delivery,
        waves=list(campaign.waves),
        created_at=rfc3339(campaign.created_at),
        updated_at=rfc3339(campaign.updated_at),
        started_at=_time(campaign.started_at),
        stopped_at=_time(campaign.stopped_at),
        finished=_time(campaign.stopped_at),
        archived_at=_time(campaign.archived_at),
        etag=rfc3339(campaign.updated_at),
    )


_HEX_ID = re.compile(r"[0-9a-f]{32}")


def metadata_id(campaign_id: str, device_id: str) -> str:
    """A campaign device metadata item's id, and back: the listing's `after` is the id of the item after which the
    next page begins (Pelion API reference, "List all campaign device metadata"), the store's cursor the device id.
    32 hex digits like Pelion's, the device's XOR the campaign's: its own inverse given the campaign (in the path),
    unique within a campaign and differing across campaigns for one device. `campaign[:16] + device[16:]` could
    not be turned back, and a page after it began again from the start. An id that is not 32 hex digits (never
    minted by devicehub) is its own item id."""
    if _HEX_ID.fullmatch(campaign_id) and _HEX_ID.fullmatch(device_id):
        return f"{int(campaign_id, 16) ^ int(device_id, 16):032x}"
    return device_id


def device_model(device: CampaignDevice) -> CampaignDeviceModel:
    return CampaignDeviceModel(
        id=metadata_id(device.campaign_id, device.device_id),
        campaign=device.campaign_id,
        device_id=device.device_id,
        name=device.endpoint_name,
        description=device.reason,
        deployment_state=device.deployment_state,
        step=device.step,
        update_result=device.update_result,
        firmware_version=device.firmware_version,
        created_at=rfc3339(device.created_at),
        updated_at=rfc3339(device.updated_at),
        etag=rfc3339(device.updated_at),
    )


def campaigns(request: web.Request) -> Campaigns:
    found = services(request).campaigns
    if found is None:
        raise Unavailable("firmware update is not running on this node")
    return found


def check_filter(device_filter: str) -> bool:
    """The directory's filter language (400 naming a bad field); whether some device can match."""
    return parse_filters([("filter", device_filter)]) is not None


def _input(body: CampaignPostBody | CampaignPutBody) -> CampaignInput:
    if body.approval_required:
        raise ValidationFailed("approval_required is not supported", fields=(FieldError("approval_required", "true"),))
    if body.state not in (None, "draft", "scheduled"):
        raise ValidationFailed("state may be draft or scheduled", fields=(FieldError("state", "not draft/scheduled"),))
    return CampaignInput(
        name=body.name,
        description=body.description,
        device_filter=body.device_filter,
        root_manifest_id=body.root_manifest_id,
        autostop=body.autostop,
        autostop_success_percent=body.autostop_success_percent,
        halt_failure_percent=body.halt_failure_percent,
        halt_min_finished=body.halt_min_finished,
        max_starts_per_minute=body.max_starts_per_minute,
        device_deadline_s=body.device_deadline_seconds,
        delivery=body.delivery,
        waves=None if body.waves is None else tuple(body.waves),
    )


_post = msgspec.json.Decoder(CampaignPostBody)
_put = msgspec.json.Decoder(CampaignPutBody)


async def create_campaign(request: web.Request) -> web.Response:
    caller = await principal(request)
    body: CampaignPostBody = decode(_post, await read_body(request, MAX_BODY))
    service = campaigns(request)
    if body.campaign_strategy not in (None, "one-shot"):
        raise ValidationFailed("only one-shot campaigns", fields=(FieldError("campaign_strategy", "not one-shot"),))
    campaign = await service.create(caller.account_id, _input(body), start=body.state == "scheduled")
    if body.state == "scheduled":
        campaign = await service.start(caller.account_id, campaign.id)
    return json_reply(campaign_model(request, campaign), 201)


async def update_campaign(request: web.Request) -> web.Response:
    caller = await principal(request)
    body: CampaignPutBody = decode(_put, await read_body(request, MAX_BODY))
    service = campaigns(request)
    campaign_id = request.match_info["campaign_id"]
    given = _input(body)
    current = await service.get(caller.account_id, campaign_id)
    if body.state == "scheduled" and current.phase != DRAFT:
        campaign = await service.start(caller.account_id, campaign_id)  # 409 naming the phase
    else:
        campaign = await service.edit(caller.account_id, campaign_id, given)
        if body.state == "scheduled":
            campaign = await service.start(caller.account_id, campaign_id)
    return json_reply(campaign_model(request, campaign))


async def get_campaign(request: web.Request) -> web.Response:
    caller = await principal(request)
    campaign = await campaigns(request).get(caller.account_id, request.match_info["campaign_id"])
    return json_reply(campaign_model(request, campaign))


async def list_campaigns(request: web.Request) -> web.Response:
    caller = await principal(request)
    page = page_query(request, 2)
    found, more = page.split(await campaigns(request).page(caller.account_id, page.after, page.fetch))
    return json_reply(
        CampaignList(
            data=[campaign_model(request, c) for c in found], has_more=more, limit=page.limit, after=page.after
        )
    )


async def delete_campaign(request: web.Request) -> web.Response:
    caller = await principal(request)
    await campaigns(request).delete(caller.account_id, request.match_info["campaign_id"])
    return web.Response(status=204)


async def start_campaign(request: web.Request) -> web.Response:
    caller = await principal(request)
    campaign = await campaigns(request).start(caller.account_id, request.match_info["campaign_id"])
    return json_reply(campaign_model(request, campaign), 202)


async def stop_campaign(request: web.Request) -> web.Response:
    caller = await principal(request)
    campaign = await campaigns(request).stop(caller.account_id, request.match_info["campaign_id"])
    return json_reply(campaign_model(request, campaign), 202)


async def archive_campaign(request: web.Request) -> web.Response:
    caller = await principal(request)
    campaign = await campaigns(request).archive(caller.account_id, request.match_info["campaign_id"])
    return json_reply(campaign_model(request, campaign))


async def list_devices(request: web.Request) -> web.Response:
    caller = await principal(request)
    page = page_query(request, 2)
    campaign_id = request.match_info["campaign_id"]
    after = None if page.after is None else metadata_id(campaign_id, page.after)  # the item's device
    found, more = page.split(await campaigns(request).devices(caller.account_id, campaign_id, after, page.fetch))
    return json_reply(
        CampaignDeviceList(data=[device_model(d) for d in found], has_more=more, limit=page.limit, after=page.after)
    )


async def _counts(request: web.Request) -> tuple[str, Tally, str]:
    caller = await principal(request)
    campaign_id = request.match_info["campaign_id"]
    counts = await campaigns(request).counts(caller.account_id, campaign_id)
    return campaign_id, counts, rfc3339(services(request).clock.now())


async def metrics(request: web.Request) -> web.Response:
    _, counts, now = await _counts(request)
    return json_reply(
        CampaignMetrics(
            total_count=counts.total,
            success_count=counts.success,
            failed_count=counts.failed,
            skipped_count=counts.skipped,
            pending_count=counts.pending,
            created_at=now,
        )
    )


async def statistics(request: web.Request) -> web.Response:
    campaign_id, counts, now = await _counts(request)
    values = {"success": counts.success, "fail": counts.failed, "info": counts.pending, "skipped": counts.skipped}
    data = [
        SummaryStatus(id=name, campaign_id=campaign_id, summary_status=name.upper(), count=count, created_at=now)
        for name, count in values.items()
    ]
    return json_reply(StatisticsList(data=data, total_count=len(data)))
