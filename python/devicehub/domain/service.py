"""The core: device lifecycle from the LwM2M layer, and the application operations the API calls."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence

import msgspec

from devicehub.clock import Clock
from devicehub.domain.accounts import Principal
from devicehub.domain.contacts import ContactBook
from devicehub.domain.device_records import (
    DIRECTORY_FIELDS,
    device_record,
    link_values,
    registration_event,
    resources_of,
    unchanged_record,
)
from devicehub.domain.events import AsyncResponseEvent, DeregistrationEvent, RegistrationEvent
from devicehub.domain.handover import CANCEL, OBSERVE, REQUESTS, DeviceHolders, DeviceWork
from devicehub.domain.held import Held
from devicehub.domain.model import Device, DeviceRequest, PresubscriptionRule, Registration, ReportedValue, ResourceLink
from devicehub.domain.object_catalog import ObjectCatalog
from devicehub.domain.paths import normalise
from devicehub.domain.ports import DeviceGateway, EventSink
from devicehub.domain.registration import Admission
from devicehub.domain.request_checks import check_operation
from devicehub.domain.requests import RequestQueue
from devicehub.domain.storage.store import Store
from devicehub.domain.subscription_calls import SubscriptionCalls
from devicehub.domain.subscriptions import SubscriptionRouter
from devicehub.errors import (
    BadRequest,
    DeviceNotFound,
    FieldError,
    ValidationFailed,
)
from devicehub.ids import new_device_id

log = logging.getLogger("devicehub.core")

ASYNC_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
# `PUT /v3/devices/{id}` (Pelion DeviceDataPutRequest): fields the application owns, and fields the device's
# registration owns, which an update may repeat (the SDK sends back what it read) but not change
REGISTRATION_FIELDS = ("endpoint_name", "endpoint_type", "host_gateway")
SNAPSHOT_RETENTION = 183 * 86400  # spec §2.4 rule 4: six months after the last connection
# an Update that changes nothing refreshes the stored `last_seen_at` (read by the six-month sweep) at most this often
SEEN_REFRESH_S = 3600.0


class DeviceService(SubscriptionCalls):
    """Implements domain.ports.DeviceEvents; knows neither HTTP nor CoAP."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        sink: EventSink,
        *,
        default_account_id: str | None = None,
        holders: DeviceHolders | None = None,
    ) -> None:
        self._store = store
        self._holders = holders  # several nodes: who holds which device, and work handed to its holder
        self._clock = clock
        self._sink = sink
        self._default_account_id = default_account_id
        self._gateway: DeviceGateway | None = None
        self._router: SubscriptionRouter | None = None
        self._requests: RequestQueue | None = None
        # device-id → registered device, with its last contact and routing answers (hot path; issue 30 #1: a value
        # costs this one fleet-sized look-up in the domain, the contact book and the router read the entry found)
        self._devices: dict[str, Held] = {}
        # values on their way to the snapshot and the channels, in arrival order; one task drains them, so a
        # notification costs no task of its own and values of one resource can never overtake each other
        self._inbox: list[tuple[Held, str, int | None, bytes]] = []
        self._drainer: asyncio.Task[None] | None = None
        self.objects = ObjectCatalog(store, clock)  # issue 32 #1: the LwM2M object model of each account
        self.contacts = ContactBook(store, clock, held=self._devices)  # issue 32 #2: each device's last contact

    async def start(self, gateway: DeviceGateway) -> None:
        self._gateway = gateway
        self._router = SubscriptionRouter(
            self._store,
            self._clock,
            gateway,
            self._sink,
            holders=self._holders,
            objects=self.objects,
            held=self._devices,
        )
        self._requests = RequestQueue(
            self._store, self._clock, gateway, self._sink, self._router, holders=self._holders, answered=self._answered
        )
        await self._requests.start()
        self.contacts.start()

    async def stop(self) -> None:
        if self._drainer is not None:
            await asyncio.gather(self._drainer, return_exceptions=True)
        if self._requests is not None:
            await self._requests.stop()
        if self._router is not None:
            await self._router.stop()
        await self.contacts.stop()

    def _answered(self, device_id: str) -> None:
        """A device answered a request: a contact."""
        held = self._devices.get(device_id)
        if held is not None:
            self.contacts.touch(held)

    @property
    def router(self) -> SubscriptionRouter:
        assert self._router is not None, "DeviceService.start() first"
        return self._router

    @property
    def requests(self) -> RequestQueue:
        assert self._requests is not None, "DeviceService.start() first"
        return self._requests

    # ---- DeviceEvents (from the LwM2M layer) ------------------------------------------------------
    async def admit(self, endpoint_name: str, endpoint_type: str, account_id: str | None = None) -> Admission | None:
        # issue 14 #1: one name is one id whatever the interleaving (and across nodes): the store claims it atomically
        minted: list[str] = []  # the id made for this name, if the store asked for one

        def mint() -> str:
            minted.append(new_device_id())
            return minted[-1]

        if account_id:  # issue 13 #2: an authenticated device belongs to its credential's account
            claimed = await self._store.admit_authenticated(account_id, endpoint_name, mint)
            if claimed is None:  # issue 28 #1: its name is enrolled into another account
                log.warning(
                    "refused endpoint %r: its name belongs to another account than its credential's", endpoint_name
                )
                return None
            device_id = claimed
        else:  # its enrolment's account, else the default one: one store round trip with the claim (issue 16 #1)
            admitted = await self._store.admit_endpoint(endpoint_name, self._default_account_id, mint)
            if admitted is None:
                log.info("refused unknown endpoint %r (not enrolled, no default account)", endpoint_name)
                return None
            account_id, device_id = admitted
        return Admission(account_id=account_id, device_id=device_id, new=device_id in minted)

    async def registered(self, registration: Registration) -> None:
        await self.registered_many([registration])

    async def registered_many(self, registrations: Sequence[Registration]) -> None:
        """A batch of full registrations (issue 16 #1): one read and one write of the store for all of them; then
        each is announced as `registered` does (what fails there is logged: the registration stands)."""
        now = self._clock.now()
        previous = {d.id: d for d in await self._store.get_devices([r.device_id for r in registrations])}
        # a child may name a gateway registering in the same batch (Edge Core and its children after a restart)
        in_batch = {(r.account_id, r.endpoint_name): r.device_id for r in registrations}
        devices, written, unchanged = [], [], []
        for r in registrations:
            named = in_batch.get((r.account_id, r.gateway)) if r.gateway != r.endpoint_name else None
            gateway = named if named is not None else await self._host_gateway(r)
            before = previous.get(r.device_id)
            resources = resources_of(r.links)
            if (
                before is not None
                and unchanged_record(before, r, resources)
                and now - before.last_seen_at < SEEN_REFRESH_S
            ):
                # registered again as it was: its record is not written again, as an Update; kept with the fleet's
                # shared resource entries, not the copies just read from the store (~3 kB a device in a storm)
                kept = msgspec.structs.replace(before, resources=resources)
                devices.append(kept)
                unchanged.append(kept.id)
            else:
                device = device_record(r, before, now, gateway, resources)
                devices.append(device)
                written.append(device)
        # spec §2.4: the values announced are reported values, stored with the registrations' entries
        reported = [(r.device_id, path, value) for r in registrations for path, value in self._link_values(r.links)]
        await self._store.put_registered_devices(written, unchanged, reported)
        waiting = await self._took([d.id for d in devices])
        rules: dict[str, list[tuple[str, list[PresubscriptionRule]]]] = {}
        for device in devices:
            self.contacts.touch(self._hold(device), now)
            try:
                if device.account_id not in rules:
                    rules[device.account_id] = await self._store.account_presubscriptions(device.account_id)
                await self.router.full_registration(device, rules=rules[device.account_id])
                await self._sink.publish_account(device.account_id, registration_event(device))
            except Exception:
                log.exception("announcing the registration of %s failed", device.id)
        await self._do_waiting(waiting)
        # a device stored only now has no queued request: an API request needs the device, and kicks its queue
        # itself (issue 16 #1); the others' queues are looked at with one read for the batch
        try:
            await self.requests.kick_many([d.id for d in devices if d.id in previous])
        except Exception:
            log.exception("reading the request queues of %d registered device(s) failed", len(previous))

    async def resumed(self, registration: Registration) -> None:
        device = await self._store.get_device(registration.device_id)
        if device is not None and device.state == "registered":
            self._hold(device)
            await self.router.load_device(device.id)
            await self.router.apply_presubscriptions(device, [])  # routes only: its observations still stand

    async def updated(self, registration: Registration, added: tuple[ResourceLink, ...]) -> None:
        device = await self._save(registration)
        self.contacts.touch(self._hold(device))
        waiting = await self._took([device.id])  # from memory when this node holds it already: no store write
        await self._store_link_values(device, added)
        await self.router.load_device(device.id)
        # spec §2.2: rules are checked at each registration update; new rules reach the device now
        await self.router.apply_presubscriptions(device, [r.path for r in device.resources])
        await self._do_waiting(waiting)
        await self._sink.publish_account(
            device.account_id,
            RegistrationEvent(
                device_id=device.id,
                endpoint_name=device.endpoint_name,
                endpoint_type=device.endpoint_type,
                queue_mode=device.queue_mode,
                resources=resources_of(added),
                update=True,
            ),
        )
        self.requests.kick(device.id)

    async def moved(self, registration: Registration) -> None:
        """Issue 31 #4: the device re-homed here (its node died; the balancer sent its next datagram here): this
        node holds it now, so other nodes hand its work here, and what waited in its queue (orphaned while no live
        node held it, or taken by the dead node and never answered) is delivered now, not at its next Update."""
        await self._do_waiting(await self._took([registration.device_id]))
        self.requests.kick(registration.device_id)

    async def deregistered(self, registration: Registration) -> None:
        await self._gone(registration, expired=False)

    def registered_record(self, device_id: str) -> Device | None:
        """The record this node keeps in memory for a registered device (what notifications are routed with)."""
        held = self._devices.get(device_id)
        return held.device if held is not None else None

    def _hold(self, device: Device) -> Held:
        """`device` is the record of a device registered here: its entry, kept (with its contact) if it had one.
        Its routing answers are worked out again (the router's load or presubscription step follows, and drops them
        too: this does not count on it)."""
        held = self._devices.get(device.id)
        if held is None:
            held = self._devices[device.id] = self.contacts.adopt(device)  # perhaps the entry it left, routes and all
        else:
            held.device = device
        held.drop_routes()
        return held

    def _release(self, device_id: str) -> None:
        """The device is no longer registered here: no value of it is taken, none of its cached routes served."""
        held = self._devices.pop(device_id, None)
        if held is not None:
            held.drop_routes()  # a value of it still in the inbox is routed from the routes left (none, once forgotten)
            self.contacts.released(held)

    async def expired(self, registration: Registration) -> None:
        await self._gone(registration, expired=True)

    def notification(
        self, device_id: str, path: str, content_format: int | None, payload: bytes, observe_seq: int | None
    ) -> None:
        self.notifications(((device_id, path, content_format, payload, observe_seq),))

    def notifications(self, values: Sequence[tuple[str, str, int | None, bytes, int | None]]) -> None:
        devices = self._devices
        inbox = self._inbox
        pending = self.contacts.pending  # issue 32 #2: the contact, on the held entry (ContactBook.touch, inlined)
        now = self._clock.now()
        for device_id, path, content_format, payload, _ in values:
            held = devices.get(device_id)  # issue 30 #1: the one fleet-sized look-up of the value in the domain
            if held is not None:
                inbox.append((held, path, content_format, payload))
                held.contact = now
                if not held.pending:
                    held.pending = True
                    pending.append(held)
        if inbox and (self._drainer is None or self._drainer.done()):
            self._drainer = asyncio.ensure_future(self._drain_inbox())

    async def _drain_inbox(self) -> None:
        while self._inbox:
            batch, self._inbox = self._inbox, []
            try:
                await self.router.deliver_held(batch)
            except Exception:  # the store or the hub failed for the whole batch: said once, the next one goes on
                log.exception("delivering %d value(s) failed", len(batch))

    async def _save(self, registration: Registration) -> Device:
        now = self._clock.now()
        held = self._devices.get(registration.device_id)
        cached = held.device if held is not None else None
        resources = resources_of(registration.links)
        if (
            cached is not None
            and unchanged_record(cached, registration, resources)
            and now - cached.last_seen_at < SEEN_REFRESH_S
        ):
            return cached  # issue 16 #1: an Update that changes nothing writes nothing here
        previous = await self._store.get_device(registration.device_id)
        device = device_record(registration, previous, now, await self._host_gateway(registration), resources)
        await self._store.put_device(device)
        await self._store.ensure_resources(device.id, [r.path for r in device.resources])
        return device  # held by the caller (updated), with no await between

    async def _host_gateway(self, registration: Registration) -> str:
        """The device-id of the gateway a child names with `gw=` (its endpoint name): a device of the same account."""
        if not registration.gateway or registration.gateway == registration.endpoint_name:
            return ""
        gateway = await self._store.find_device(registration.account_id, registration.gateway)
        return gateway.id if gateway is not None else ""

    async def _store_link_values(self, device: Device, links: Sequence[ResourceLink]) -> None:
        """spec §2.4: values announced in the register message are reported values."""
        for path, value in self._link_values(links):
            await self._store.set_reported(device.id, path, value)

    def _link_values(self, links: Sequence[ResourceLink]) -> list[tuple[str, ReportedValue]]:
        return link_values(links, self._clock.now())

    async def _took(self, device_ids: Sequence[str]) -> list[DeviceWork]:
        """This node holds these devices now (issue 31 #1); a failed record is logged: the registration stands,
        and work other nodes take for the device waits for its next contact. Returns the work that waited for them."""
        if self._holders is not None:
            try:
                return await self._holders.took(device_ids)
            except Exception:
                log.exception("recording this node as the holder of %d device(s) failed", len(device_ids))
        return []

    async def _do_waiting(self, works: Sequence[DeviceWork]) -> None:
        for work in works:  # taken by other nodes while no live node held these devices (issue 31 #4)
            try:
                await self.take_work(work, waited=True)
            except Exception:
                log.exception("device work %s of %s that waited for it failed", work.kind, work.device_id)

    async def take_work(self, work: DeviceWork, *, waited: bool = False) -> None:
        """Work another node took for a device held here (issue 31 #1), or that waited for the device (`waited`);
        its results are events, as for work taken here."""
        if work.kind == REQUESTS:
            self.requests.kick(work.device_id)  # reads the queue the other node wrote to
        elif work.kind == OBSERVE:
            held = self._devices.get(work.device_id)
            device = held.device if held is not None else await self._store.get_device(work.device_id)
            if device is not None:
                await self.router.observe_handed(device, work, waited=waited)
        elif work.kind == CANCEL:
            await self.router.unrouted(work.device_id, work.pattern)
        else:
            log.warning("unknown device work %r for %s ignored", work.kind, work.device_id)

    async def _gone(self, registration: Registration, *, expired: bool) -> None:
        if self._holders is not None:
            try:
                await self._holders.released(registration.device_id)
            except Exception:
                log.exception("releasing the holder record of %s failed", registration.device_id)
        device = await self._store.get_device(registration.device_id)
        self._release(registration.device_id)
        # no notification comes while it is away; a Register or Update rebuilds its routes
        self.router.forget(registration.device_id)
        if device is None:
            return
        now = self._clock.now()
        await self._store.put_device(
            msgspec.structs.replace(device, state="deregistered", updated_at=now, last_seen_at=now)
        )
        await self._sink.publish_account(
            device.account_id,
            DeregistrationEvent(device_id=device.id, endpoint_name=device.endpoint_name, expired=expired),
        )

    # ---- application operations ---------------------------------------------------------------------
    async def settled(self) -> None:
        """Every registration answered so far is in the store (what a device listing reads)."""
        if self._gateway is not None:
            await self._gateway.settled()

    async def device_for(self, principal: Principal, device_id: str) -> Device:
        """The device if it belongs to the caller's account; another account's device is 404 (issue 6)."""
        if self._gateway is not None:
            await self._gateway.settled(device_id)
        device = await self._store.get_device(device_id)
        if device is None or device.account_id != principal.account_id:
            raise DeviceNotFound(f"no device {device_id!r}")
        return device

    async def update_device(self, principal: Principal, device_id: str, changes: dict[str, object]) -> Device:
        """Directory fields set by the application; registration-owned fields may only repeat their value."""
        device = await self.device_for(principal, device_id)
        fixed = [
            FieldError(name, f"set by the device's registration ({getattr(device, name)!r})")
            for name in REGISTRATION_FIELDS
            if name in changes and changes[name] != getattr(device, name)
        ]
        if fixed:
            raise ValidationFailed("registration fields cannot be changed", fields=tuple(fixed))
        values = {name: changes[name] for name in DIRECTORY_FIELDS if name in changes}
        updated = msgspec.structs.replace(device, **values)
        await self._store.put_device(updated)
        held = self._devices.get(device_id)
        if held is not None:
            held.device = updated
        return updated

    async def delete_device(self, principal: Principal, device_id: str) -> None:
        """Remove the device: drop its registration, answer its waiting requests, delete it and its snapshot."""
        device = await self.device_for(principal, device_id)
        connected = self._gateway is not None and await self._gateway.drop(device_id)
        if self._holders is not None:  # its record goes with it (another node's stays: it drops its registration)
            await self._holders.released(device_id)
        self._release(device_id)
        waiting = await self.requests.forget(device_id)
        self.router.forget(device_id)
        self.contacts.forget(device_id)
        await self._store.delete_device(device_id)
        await self._store.delete_contacts(device.account_id, [device_id])
        for request in waiting:  # wire-format.md: not delivered, the registration was removed
            await self._sink.publish(
                [request.key_id],
                AsyncResponseEvent(
                    async_id=request.async_id, status=429, error="DEVICE_REMOVED_REGISTRATION", device_id=device_id
                ),
            )
        if connected:
            await self._sink.publish_account(
                device.account_id, DeregistrationEvent(device_id=device.id, endpoint_name=device.endpoint_name)
            )

    async def device_request(
        self,
        principal: Principal,
        device_id: str,
        async_id: str,
        *,
        method: str,
        uri: str,
        payload: bytes,
        content_type: str | None,
        accept: str | None,
        retry: int | None,
        expiry_seconds: int | None,
    ) -> None:
        if not ASYNC_ID.match(async_id):
            raise BadRequest("async-id must match ^[A-Za-z0-9_-]{1,40}$", token="MALFORMED_ASYNC_ID")
        device = await self.device_for(principal, device_id)
        if method not in ("GET", "PUT", "POST", "DELETE"):
            raise ValidationFailed("method must be GET, PUT, POST or DELETE")
        path, _, query = uri.partition("?")
        path = normalise(path, wildcard=False, field="uri")
        normalised = path + (("?" + query) if query else "")
        # an Edge child's translator declares its resources' operations itself (Mbed Edge's `device_register`),
        # often unlike the registry; a resource the model does not know is left to the device, as before
        resource = None if device.host_gateway else await self.objects.resource(device.account_id, path)
        if resource is not None:
            check_operation(resource, method, path, payload, content_type)
        # wire-format.md: defaults 0 / 7200 s, for a queue-mode device 2 / 259 200 s
        retries = retry if retry is not None else (2 if device.queue_mode else 0)
        expiry = expiry_seconds if expiry_seconds is not None else (259_200 if device.queue_mode else 7200)
        now = self._clock.now()
        await self.requests.submit(
            DeviceRequest(
                async_id=async_id,
                key_id=principal.key_id,
                account_id=principal.account_id,
                device_id=device_id,
                method=method,
                uri=normalised,
                payload=payload,
                content_type=content_type,
                accept=accept,
                retries_left=retries,
                created_at=now,
                expires_at=now + expiry,
            )
        )

    async def sweep_snapshots(self) -> int:
        """spec §2.4 rule 4: remove devices (and snapshots) unseen for six months."""
        removed = 0
        for device_id in await self._store.devices_last_seen_before(self._clock.now() - SNAPSHOT_RETENTION):
            device = await self._store.get_device(device_id)
            if device is not None and device.state != "registered":
                await self._store.delete_device(device_id)
                removed += 1
        return removed
