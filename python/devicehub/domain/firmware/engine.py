"""The campaign engine: chooses a started campaign's devices, updates each over LwM2M object 5 (pull: Package URI,
then Update), applies the pace, the per-device deadline and the stop rules, and moves the campaign's phase.

One engine works at a time: in Redis mode the node holding the `firmware:campaigns` lease (the store's named
leases), alone in SQLite mode. Every step of a device is stored before the next request goes to it, so an engine
that restarts (or another node that takes the lease) picks each device up where it was: a device in `downloading`
is read again, one in `updating` waits for its result. In Redis mode a device registered at another node is handed
to that node, its holder (issue 31 #1's hand-over, `DeviceHolders`): the holder's engine updates it from its stored
step (`take`), over its own session and file server, and the store tells the lease holder what became of it.

Per device (OMA 5.xml): Write Package URI /5/0/1 → poll State /5/0/3 and Update Result /5/0/5 every
`check_interval` → when State is Downloaded (2), Execute Update /5/0/2 → the device reboots and registers again →
Update Result 1 is success (and /3/0/3 read for the new version), any failure code fails it with 5.xml's words.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceError
from devicehub.domain.firmware import object5
from devicehub.domain.firmware.announce import firmware_event
from devicehub.domain.firmware.catalog import FirmwareCatalog
from devicehub.domain.firmware.delivery import PackageUri, call_off, deliver
from devicehub.domain.firmware.object5 import Failed, device_version, dotted, read_int
from devicehub.domain.firmware.reads import all_devices, campaign_image
from devicehub.domain.firmware.rules import SKIPPED_STEP, kind, stop_reason, tally, wave_room
from devicehub.domain.firmware_model import (
    ACTIVE,
    DEPLOYED,
    DEREGISTERED,
    FAILED_CHANNEL,
    STARTING,
    STOPPED,
    STOPPING,
    UPDATED_CHANNEL,
    Campaign,
    CampaignDevice,
    FirmwareImage,
)
from devicehub.domain.handover import FIRMWARE, FIRMWARE_CANCEL, DeviceHolders, DeviceWork
from devicehub.domain.ports import DeviceGateway, EventSink
from devicehub.domain.storage.device_query import DeviceQuery
from devicehub.domain.storage.store import Store

log = logging.getLogger("devicehub.firmware")

LEASE = "firmware:campaigns"
LEASE_TTL = 30.0
TICK = 1.0  # seconds between passes over the running campaigns (a start or stop wakes the engine at once)

QUEUED, DOWNLOADING, UPDATING, DONE = "queued", "downloading", "updating", "done"
HAND_AGAIN = 30.0  # seconds before a device handed to its holder, and not finished, is handed again (a holder that
# restarted lost its task; one still running it ignores the repeat)

# the device filter, parsed with the directory's filter language (api/directory_filter.py); None: nothing matches
ParseFilter = Callable[[str], DeviceQuery | None]


@dataclass(slots=True)
class EngineCounters:
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    halted_campaigns: int = 0


class CampaignEngine:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        gateway: DeviceGateway,
        catalog: FirmwareCatalog,
        parse_filter: ParseFilter,
        package_uri: PackageUri,
        *,
        owner: str,
        holders: DeviceHolders | None = None,
        events: EventSink | None = None,
        concurrency: int = 200,
        check_interval: float = 2.0,
    ) -> None:
        self._store = store
        self._clock = clock
        self._gateway = gateway
        self._catalog = catalog
        self._parse_filter = parse_filter
        self._package_uri = package_uri
        self._owner = owner
        self._holders = holders
        self._events = events  # campaign and device changes, for the channels that opted in and the console
        self._handed: dict[tuple[str, str], float] = {}  # (campaign, device) → when it went to its holder
        self._remote: set[tuple[str, str]] = set()  # updates another node's engine handed here
        self._concurrency = concurrency
        self._check_interval = check_interval
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}  # (campaign, device) → its update
        # finished here: a pass that read the device before its last write must not start it again
        self._finished: set[tuple[str, str]] = set()
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._closed = False
        self.counters = EngineCounters()

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="firmware-engine")

    async def stop(self) -> None:
        self._closed = True  # Python 3.11's wait_for can swallow a cancel that meets its time-out: the loop checks this
        tasks = [t for t in (self._loop, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        if self._store.shared:
            with contextlib.suppress(Exception):
                await self._store.release_lease(LEASE, self._owner)

    async def wake(self, campaign: Campaign) -> None:
        """The API moved the campaign (start, stop, archive): said, and the engine looks at once."""
        await self._announce(campaign)
        self._wake.set()

    async def _announce(self, campaign: Campaign, device: CampaignDevice | None = None) -> None:
        """A campaign's new phase, or a device's new state, to the account's channels that opted in and its console."""
        try:
            if self._events is not None:
                await self._events.publish_account(campaign.account_id, firmware_event(campaign, device))
        except Exception as error:  # an event lost never stops a rollout
            log.warning("firmware event of campaign %s not published: %s", campaign.id, error)

    async def _run(self) -> None:
        while not self._closed:
            try:
                if not self._store.shared or await self._store.acquire_lease(
                    LEASE, self._owner, LEASE_TTL, self._clock.now()
                ):
                    await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the store failed this pass: said, and the next pass tries again
                log.warning("firmware campaigns: %s", error)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK)

    async def tick(self) -> None:
        for campaign in await self._store.running_campaigns():
            if campaign.phase == STARTING:
                await self._choose_devices(campaign)
            else:
                await self._advance(campaign)

    # ---- phases --------------------------------------------------------------------------------------------
    async def _set_phase(self, campaign: Campaign, phase: str, reason: str | None = None) -> Campaign:
        now = self._clock.now()
        changed = msgspec.structs.replace(campaign, phase=phase, updated_at=now)
        if reason is not None:
            changed = msgspec.structs.replace(changed, autostop_reason=reason)
        if phase == STOPPED:
            changed = msgspec.structs.replace(changed, stopped_at=now)
        current = await self._store.get_campaign(campaign.account_id, campaign.id)
        if current is None or current.phase != campaign.phase:
            return current or campaign  # the API moved it meanwhile (stopped): its move stands
        await self._store.put_campaign(changed)
        await self._announce(changed)
        log.info("campaign %s: %s → %s %s", campaign.id, campaign.phase, phase, reason or "")
        return changed

    async def _choose_devices(self, campaign: Campaign) -> None:
        """starting → active with its devices, stored together; with none, stopped saying so."""
        query = self._parse_filter(campaign.device_filter)
        now = self._clock.now()
        chosen: list[CampaignDevice] = []
        after: str | None = None
        while query is not None:
            page = await self._store.list_devices(campaign.account_id, query=query, after=after, limit=1000)
            for device in page:
                registered = device.state == "registered"  # in the directory: at this node or another
                chosen.append(
                    CampaignDevice(
                        campaign_id=campaign.id,
                        device_id=device.id,
                        endpoint_name=device.endpoint_name,
                        deployment_state="pending" if registered else DEREGISTERED,
                        reason="" if registered else "not registered when the campaign started",
                        step=QUEUED if registered else DONE,
                        created_at=now,
                        updated_at=now,
                    )
                )
            if len(page) < 1000:
                break
            after = page[-1].id
        if not chosen:
            await self._set_phase(campaign, STOPPED, "no device matches the campaign's device filter")
            return
        active = msgspec.structs.replace(campaign, phase=ACTIVE, updated_at=now)
        current = await self._store.get_campaign(campaign.account_id, campaign.id)
        if current is None or current.phase != STARTING:
            return
        await self._store.start_campaign_devices(active, chosen)
        await self._announce(active)
        for gone in (d for d in chosen if d.deployment_state == DEREGISTERED):  # final at once; others when they move
            await self._announce(active, gone)
        log.info("campaign %s: %d device(s) chosen", campaign.id, len(chosen))

    async def _advance(self, campaign: Campaign) -> None:
        devices = await self._all_devices(campaign)
        counts = tally(devices)
        now = self._clock.now()
        if campaign.phase == ACTIVE:
            reason = stop_reason(campaign, counts)
            if reason is not None:
                if reason.startswith("halted"):
                    self.counters.halted_campaigns += 1
                campaign = await self._set_phase(campaign, STOPPING, reason)
        if campaign.phase == STOPPING:
            await self._wind_down(campaign, devices)
            return
        if campaign.phase != ACTIVE:
            return
        for device in devices:
            key = (campaign.id, device.device_id)
            if kind(device) != "pending":
                self._handed.pop(key, None)
            elif device.step in (DOWNLOADING, UPDATING) and not await self._past_deadline(campaign, device):
                if key not in self._tasks and not await self._hand(campaign, device):  # started before a restart
                    self._spawn(campaign, device)
        image = await self._image(campaign)
        if image is None:
            await self._set_phase(campaign, STOPPING, "the campaign's manifest or image was deleted")
            return
        handed = [d for d in devices if d.step == QUEUED and (campaign.id, d.device_id) in self._handed]
        budget = self._concurrency - len(self._tasks) - sum(1 for k in self._handed if k[0] == campaign.id)
        budget = min(budget, wave_room(campaign.waves, devices, {d.device_id for d in handed}))
        if campaign.max_starts_per_minute is not None:
            recent = sum(1 for d in devices if d.started_at is not None and now - d.started_at < 60.0)
            budget = min(budget, campaign.max_starts_per_minute - recent - len(handed))
        for device in devices:
            if budget <= 0:
                break
            if device.step != QUEUED or (campaign.id, device.device_id) in self._handed:
                continue
            if self._gateway.registration(device.device_id) is not None:
                self._spawn(campaign, device, image)
                budget -= 1
            elif await self._hand(campaign, device):
                budget -= 1
        if counts.pending == 0:
            await self._set_phase(campaign, STOPPED, campaign.autostop_reason or "")

    async def _hand(self, campaign: Campaign, device: CampaignDevice) -> bool:
        """Whether the device's update is with the node holding it: handed now or lately (Redis mode, the device
        registered at another node). False when it is registered here, or no live node holds it (it waits)."""
        key = (campaign.id, device.device_id)
        if self._holders is None or self._gateway.registration(device.device_id) is not None:
            return False
        now = self._clock.now()
        if now - self._handed.get(key, float("-inf")) < HAND_AGAIN:
            return True
        work = DeviceWork(FIRMWARE, device.device_id, key_id=campaign.account_id, pattern=campaign.id)
        if not await self._holders.hand_over(work):
            return False
        self._handed[key] = now
        return True

    async def take(self, account_id: str, campaign_id: str, device_id: str) -> None:
        """The update of a device registered here, in a campaign another node's engine runs (it handed the device
        over): done here from the device's stored step, as that engine would; each step is stored, which is how
        that engine follows it."""
        key = (campaign_id, device_id)
        if key in self._tasks or key in self._finished or self._gateway.registration(device_id) is None:
            return
        campaign = await self._store.get_campaign(account_id, campaign_id)
        device = await self._store.get_campaign_device(account_id, campaign_id, device_id)
        if campaign is None or device is None or kind(device) != "pending":
            return
        if campaign.phase != ACTIVE and not (campaign.phase == STOPPING and device.step == UPDATING):
            return  # a stopping campaign lets installing devices finish, and starts none
        image = await self._image(campaign) if device.step == QUEUED else None
        if device.step == QUEUED and image is None:
            return  # the lease holder stops the campaign for it
        self._remote.add(key)
        self._spawn(campaign, device, image)

    async def _call_off(self, campaign: Campaign, device_id: str) -> None:
        """A download the stop ends: the empty Package URI written here, or by the node holding the device (Redis
        mode: it has the device's session; its engine's `cancel`)."""
        if self._holders is not None and self._gateway.registration(device_id) is None:
            work = DeviceWork(FIRMWARE_CANCEL, device_id, key_id=campaign.account_id, pattern=campaign.id)
            if await self._holders.hand_over(work):
                return
        await call_off(self._gateway, device_id)

    async def cancel(self, campaign_id: str, device_id: str) -> None:
        """The lease holder stopped a campaign while this node's device downloaded (handed over): the update here ends
        and the device is told to drop its download."""
        task = self._tasks.pop((campaign_id, device_id), None)
        if task is not None:
            task.cancel()
        if self._gateway.registration(device_id) is not None:
            await call_off(self._gateway, device_id)

    async def _settled_elsewhere(self, campaign: Campaign, device_id: str) -> bool:
        """A handed-over update: whether the lease holder finished the device meanwhile (its deadline, a stop)."""
        if (campaign.id, device_id) not in self._remote:
            return False
        stored = await self._store.get_campaign_device(campaign.account_id, campaign.id, device_id)
        return stored is None or stored.step in (DONE, SKIPPED_STEP)

    async def _past_deadline(self, campaign: Campaign, device: CampaignDevice) -> bool:
        """Fail the device (and stop its update) when the campaign's per-device deadline passed since its start."""
        deadline = campaign.device_deadline_s
        key = (campaign.id, device.device_id)
        if deadline is None or device.started_at is None or key in self._finished:
            return False
        if self._clock.now() - device.started_at <= deadline:
            return False
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()
        await self._finish(campaign, device, False, f"no result within the device deadline of {deadline:g} s")
        return True

    async def _wind_down(self, campaign: Campaign, devices: list[CampaignDevice]) -> None:
        """stopping: devices not started are skipped, downloads are cancelled (an empty Package URI resets the
        device's state machine, 5.xml State); devices already updating finish; then stopped."""
        busy = False
        for device in devices:
            if kind(device) != "pending":
                continue
            if (campaign.id, device.device_id) in self._finished:
                continue  # finished by its update since the devices were read
            if device.step == UPDATING:
                if await self._past_deadline(campaign, device):
                    continue
                busy = True
                if (campaign.id, device.device_id) not in self._tasks and not await self._hand(campaign, device):
                    self._spawn(campaign, device)
                continue
            task = self._tasks.pop((campaign.id, device.device_id), None)
            if task is not None:
                task.cancel()
            if device.step == DOWNLOADING:
                await self._call_off(campaign, device.device_id)
            await self._save(
                campaign,
                device,
                step=SKIPPED_STEP,
                reason=f"not updated: the campaign stopped ({campaign.autostop_reason})",
            )
        if not busy:
            await self._set_phase(campaign, STOPPED)

    async def _all_devices(self, campaign: Campaign) -> list[CampaignDevice]:
        return await all_devices(self._store, campaign)

    async def _image(self, campaign: Campaign) -> FirmwareImage | None:
        return await campaign_image(self._store, self._catalog, campaign)

    # ---- one device ----------------------------------------------------------------------------------------
    def _spawn(self, campaign: Campaign, device: CampaignDevice, image: FirmwareImage | None = None) -> None:
        key = (campaign.id, device.device_id)
        if key in self._finished:
            return
        task = asyncio.create_task(self._update(campaign, device, image), name=f"fota-{device.device_id}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._done(key, task))

    def _done(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
            self._remote.discard(key)

    async def _save(self, campaign: Campaign, device: CampaignDevice, **changes: object) -> CampaignDevice:
        before = (device.deployment_state, device.step == SKIPPED_STEP)
        device = msgspec.structs.replace(device, updated_at=self._clock.now(), **changes)
        await self._store.put_campaign_device(campaign.account_id, device)
        if (device.deployment_state, device.step == SKIPPED_STEP) != before:
            await self._announce(campaign, device)
        return device

    async def _finish(self, campaign: Campaign, device: CampaignDevice, success: bool, reason: str) -> None:
        self._finished.add((campaign.id, device.device_id))
        if success:
            self.counters.succeeded += 1
        else:
            self.counters.failed += 1
        await self._save(
            campaign,
            device,
            step=DONE,
            deployment_state=DEPLOYED if success else FAILED_CHANNEL,
            reason=reason,
            finished_at=self._clock.now(),
        )
        self._wake.set()  # the stop rules look at every finished device at once

    async def _update(self, campaign: Campaign, device: CampaignDevice, image: FirmwareImage | None) -> None:
        latest = [device]  # the device as last stored, for the failure to be written over
        try:
            await self._run_device(campaign, latest, image)
        except asyncio.CancelledError:
            raise
        except Failed as failure:
            await self._finish(campaign, latest[0], False, str(failure))
        except Exception as error:  # the store failed: the next pass picks the device up again
            log.warning("campaign %s device %s: %s", campaign.id, device.device_id, error)

    async def _run_device(self, campaign: Campaign, latest: list[CampaignDevice], image: FirmwareImage | None) -> None:
        gateway = self._gateway
        device = latest[0]
        device_id = device.device_id
        if device.step == QUEUED:
            device = latest[0] = await self._save(
                campaign,
                device,
                step=DOWNLOADING,
                deployment_state=UPDATED_CHANNEL,
                started_at=self._clock.now(),
                reason=f"package delivered ({campaign.delivery})",
            )
            self.counters.started += 1
            if image is None:
                raise Failed("the campaign's image is gone")
            try:
                written = await deliver(self._store, self._gateway, self._package_uri, campaign, device_id, image)
            except DeviceError as error:
                raise Failed(f"delivering the package ({campaign.delivery}) failed: {error}") from None
            if written.code >> 5 != 2:
                target = object5.PACKAGE if campaign.delivery == "push" else object5.PACKAGE_URI
                raise Failed(f"the device refused the package {target}: {dotted(written)}")
        while True:
            await self._clock.sleep(self._check_interval)
            if await self._settled_elsewhere(campaign, device_id):
                return
            registration = gateway.registration(device_id)
            if registration is None:
                continue  # rebooting or gone: the deadline (if any) decides
            try:
                if device.step == DOWNLOADING:
                    state = await read_int(gateway, device_id, object5.STATE)
                    result = await read_int(gateway, device_id, object5.UPDATE_RESULT)
                    device = latest[0] = await self._noted(campaign, device, result)
                    verdict = object5.outcome(result)
                    if verdict.done and not verdict.success:
                        raise Failed(verdict.reason)
                    if state == object5.DOWNLOADED and result != object5.DEFERRED:
                        device = latest[0] = await self._save(
                            campaign, device, step=UPDATING, executed_at=self._clock.now(), reason="update executed"
                        )
                        executed = await gateway.request(device_id, "POST", object5.UPDATE)
                        if executed.code >> 5 != 2:
                            raise Failed(f"Update {object5.UPDATE} answered {dotted(executed)}")
                elif device.step == UPDATING:
                    result = await read_int(gateway, device_id, object5.UPDATE_RESULT)
                    device = latest[0] = await self._noted(campaign, device, result)
                    verdict = object5.outcome(result)
                    came_back = device.executed_at is not None and registration.registered_at > device.executed_at
                    if verdict.done and not verdict.success:
                        raise Failed(verdict.reason)
                    if verdict.success and (
                        came_back or await read_int(gateway, device_id, object5.STATE) == object5.IDLE
                    ):
                        version = await device_version(gateway, device_id)
                        await self._save(campaign, device, firmware_version=version)
                        device = msgspec.structs.replace(device, firmware_version=version)
                        await self._finish(campaign, device, True, verdict.reason)
                        return
                else:
                    return
            except DeviceError:
                continue  # no answer now (rebooting, a lost datagram): asked again at the next check

    async def _noted(self, campaign: Campaign, device: CampaignDevice, result: int) -> CampaignDevice:
        """The device with its last Update Result stored (written only when it changed)."""
        if device.update_result == result:
            return device
        return await self._save(campaign, device, update_result=result)
