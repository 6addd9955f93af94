"""Update campaigns as the API changes them: create and edit drafts, start, stop, archive, delete, and their devices'
states and counts. The engine (engine.py) does the rollout; this module only moves phases the API may move."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from devicehub.clock import Clock
from devicehub.domain.firmware.catalog import FirmwareCatalog
from devicehub.domain.firmware.phases import DELETABLE, EDITABLE, PhaseConflict, moved
from devicehub.domain.firmware.rules import Tally, tally
from devicehub.domain.firmware_model import Campaign, CampaignDevice
from devicehub.domain.storage.store import Store
from devicehub.errors import FieldError, NotFound, ValidationFailed
from devicehub.ids import new_id

# the device filter checked at the edge (the directory's filter language, api/directory_filter.py): raises
# ValidationFailed naming a bad field, and says whether some device can match
FilterCheck = Callable[[str], bool]


class CampaignNotFound(NotFound):
    """No such update campaign in this account."""


@dataclass(frozen=True, slots=True)
class CampaignInput:
    """The fields a create or an edit gives (None: not given)."""

    name: str | None = None
    description: str | None = None
    device_filter: str | None = None
    root_manifest_id: str | None = None
    autostop: bool | None = None
    autostop_success_percent: float | None = None
    halt_failure_percent: float | None = None
    halt_min_finished: int | None = None
    max_starts_per_minute: int | None = None
    device_deadline_s: float | None = None
    delivery: str | None = None
    waves: tuple[float, ...] | None = None


MAX_PUSH = 1 << 20  # the largest CoAP body sent block-wise (lwm2m/coap/parameters.py MAX_BODY)


def _rising_to_100(waves: tuple[float, ...]) -> bool:
    # pairs (0, w1), (w1, w2), …: the first wave above 0, each above the one before
    return 1 <= len(waves) <= 10 and waves[-1] == 100 and all(a < b for a, b in itertools.pairwise((0, *waves)))


class Campaigns:
    def __init__(self, store: Store, clock: Clock, catalog: FirmwareCatalog, check_filter: FilterCheck) -> None:
        self._store = store
        self._clock = clock
        self._catalog = catalog
        self._check_filter = check_filter
        self.on_change: Callable[[Campaign], Awaitable[None]] | None = None  # the engine's wake-up

    async def _validated(self, account_id: str, given: CampaignInput) -> None:
        if given.device_filter is not None:
            if not given.device_filter.strip():
                raise ValidationFailed(
                    "device_filter is empty: a campaign must name the devices it updates (`endpoint_type=sensor`)",
                    fields=(FieldError("device_filter", "empty"),),
                )
            self._check_filter(given.device_filter)
        if given.root_manifest_id is not None:
            if await self._store.get_firmware_manifest(account_id, given.root_manifest_id) is None:
                raise ValidationFailed(
                    f"no firmware manifest {given.root_manifest_id} in this account",
                    fields=(FieldError("root_manifest_id", "unknown manifest"),),
                )
        if given.waves is not None and not _rising_to_100(given.waves):
            message = "waves are rising percentages ending at 100, at most 10 (e.g. [1, 10, 100])"
            raise ValidationFailed(message, fields=(FieldError("waves", "not rising percentages to 100"),))
        if given.delivery not in (None, "pull", "push"):
            raise ValidationFailed("delivery is pull or push", fields=(FieldError("delivery", "not pull or push"),))
        for name, value, low, high in (
            ("autostop_success_percent", given.autostop_success_percent, 0, 100),
            ("halt_failure_percent", given.halt_failure_percent, 0, 100),
            ("halt_min_finished", given.halt_min_finished, 1, 1_000_000),
            ("max_starts_per_minute", given.max_starts_per_minute, 1, 1_000_000),
            ("device_deadline_s", given.device_deadline_s, 1, 30 * 86400),
        ):
            if value is not None and not low <= value <= high:
                raise ValidationFailed(f"{name} must be {low}…{high}", fields=(FieldError(name, "out of range"),))

    @staticmethod
    def _changes(given: CampaignInput) -> dict[str, object]:
        return {f: getattr(given, f) for f in CampaignInput.__dataclass_fields__ if getattr(given, f) is not None}

    async def create(self, account_id: str, given: CampaignInput, *, start: bool = False) -> Campaign:
        if given.device_filter is None:
            raise ValidationFailed("device_filter is required", fields=(FieldError("device_filter", "missing"),))
        await self._validated(account_id, given)
        now = self._clock.now()
        campaign_id = new_id()
        fields = self._changes(given)
        fields.setdefault("name", campaign_id)
        fields.setdefault("root_manifest_id", "")
        campaign = Campaign(id=campaign_id, account_id=account_id, created_at=now, updated_at=now, **fields)  # type: ignore[arg-type]
        if start:  # created to start at once (SDK 2.x `state: scheduled`): nothing is written unless it can
            await self._check_startable(campaign)
        await self._store.put_campaign(campaign)
        return campaign

    async def get(self, account_id: str, campaign_id: str) -> Campaign:
        campaign = await self._store.get_campaign(account_id, campaign_id)
        if campaign is None:
            raise CampaignNotFound(f"no update campaign {campaign_id}")
        return campaign

    async def page(self, account_id: str, after: str | None, limit: int) -> list[Campaign]:
        return await self._store.list_campaigns(account_id, after=after, limit=limit)

    async def edit(self, account_id: str, campaign_id: str, given: CampaignInput) -> Campaign:
        campaign = await self.get(account_id, campaign_id)
        changes = self._changes(given)
        if not changes:
            return campaign
        if campaign.phase not in EDITABLE:
            raise PhaseConflict(f"a campaign in phase {campaign.phase} cannot be changed (only a draft)")
        await self._validated(account_id, given)
        campaign = msgspec.structs.replace(campaign, updated_at=self._clock.now(), **changes)
        await self._store.put_campaign(campaign)
        return campaign

    async def _check_startable(self, campaign: Campaign) -> None:
        """409 unless the campaign's manifest and the image it delivers are there (and push can carry it)."""
        if not campaign.root_manifest_id:
            raise PhaseConflict("the campaign has no root_manifest_id: set one before starting it")
        manifest = await self._store.get_firmware_manifest(campaign.account_id, campaign.root_manifest_id)
        if manifest is None:
            raise PhaseConflict(f"the campaign's manifest {campaign.root_manifest_id} was deleted")
        image = await self._catalog.image_for(campaign.account_id, manifest)
        if campaign.delivery == "push" and image.datafile_size > MAX_PUSH:
            raise PhaseConflict(f"push delivers images up to {MAX_PUSH} bytes; this one is {image.datafile_size}: pull")

    async def start(self, account_id: str, campaign_id: str) -> Campaign:
        """draft → starting, once its manifest and the image it delivers are there (409 otherwise, the campaign
        left a draft); the engine chooses the devices and makes it active."""
        campaign = await self.get(account_id, campaign_id)
        target = moved(campaign.phase, "start")
        await self._check_startable(campaign)
        now = self._clock.now()
        campaign = msgspec.structs.replace(campaign, phase=target, started_at=now, updated_at=now, autostop_reason="")
        await self._store.put_campaign(campaign)
        if self.on_change is not None:
            await self.on_change(campaign)
        return campaign

    async def stop(self, account_id: str, campaign_id: str) -> Campaign:
        campaign = await self.get(account_id, campaign_id)
        campaign = msgspec.structs.replace(
            campaign,
            phase=moved(campaign.phase, "stop"),
            updated_at=self._clock.now(),
            autostop_reason="stopped by the user",
        )
        await self._store.put_campaign(campaign)
        if self.on_change is not None:
            await self.on_change(campaign)
        return campaign

    async def archive(self, account_id: str, campaign_id: str) -> Campaign:
        campaign = await self.get(account_id, campaign_id)
        now = self._clock.now()
        campaign = msgspec.structs.replace(
            campaign, phase=moved(campaign.phase, "archive"), archived_at=now, updated_at=now
        )
        await self._store.put_campaign(campaign)
        if self.on_change is not None:
            await self.on_change(campaign)
        return campaign

    async def delete(self, account_id: str, campaign_id: str) -> None:
        campaign = await self.get(account_id, campaign_id)
        if campaign.phase not in DELETABLE:
            raise PhaseConflict(f"a campaign in phase {campaign.phase} cannot be deleted: stop it first")
        await self._store.delete_campaign(account_id, campaign_id)

    async def devices(self, account_id: str, campaign_id: str, after: str | None, limit: int) -> list[CampaignDevice]:
        await self.get(account_id, campaign_id)
        return await self._store.list_campaign_devices(account_id, campaign_id, after=after, limit=limit)

    async def counts(self, account_id: str, campaign_id: str) -> Tally:
        await self.get(account_id, campaign_id)
        return await counts_of(self._store, account_id, campaign_id)


async def counts_of(store: Store, account_id: str, campaign_id: str) -> Tally:
    devices: list[CampaignDevice] = []
    after: str | None = None
    while True:
        page = await store.list_campaign_devices(account_id, campaign_id, after=after, limit=1000)
        devices += page
        if len(page) < 1000:
            return tally(devices)
        after = page[-1].device_id
