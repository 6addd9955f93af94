"""The registration interface: Register, Update and De-register (LwM2M 1.1 §6.2), with admission and identity rules.

A Register is answered at once and stored with the next batch (issue 16 #1); beyond the backlog bound it is shed with
5.03 and a Max-Age booked in the retry calendar (issue 16 #2). Facts it follows: lwm2m-device-side.md §10.
"""

from __future__ import annotations

import logging

import msgspec

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.clock import Clock
from devicehub.domain.device_log import DEREGISTERED, new_event
from devicehub.domain.model import Registration, ResourceLink
from devicehub.domain.ports import DeviceEvents
from devicehub.domain.registration import UDP
from devicehub.domain.usage import DELETED_REGISTRATIONS
from devicehub.lwm2m import codes
from devicehub.lwm2m.authorizer import Authorizer
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.links import LinkFormatError, parse_links
from devicehub.lwm2m.observations import ObservationService
from devicehub.lwm2m.query import MAX_ENDPOINT_NAME, endpoint_name_in, parse_query
from devicehub.lwm2m.registration_writer import RegistrationWriter
from devicehub.lwm2m.registry import Device, Observation, Registry
from devicehub.lwm2m.security import PeerIdentity
from devicehub.lwm2m.server_stats import ServerStats

log = logging.getLogger("devicehub.lwm2m")

DEFAULT_LIFETIME = 86_400  # LwM2M default `lt`
MAX_LIFETIME = 72 * 3600  # Pelion caps the lifetime at 72 h (lwm2m-device-side.md §2)
MIN_LIFETIME = 1
SUPPORTED_VERSIONS = ("1.0", "1.1")


class RegistrationHandler:
    """Turns `/rd` requests into registrations held in the registry, stored by the writer, reported to the core."""

    def __init__(
        self,
        registry: Registry,
        writer: RegistrationWriter,
        authorizer: Authorizer,
        observations: ObservationService,
        events: DeviceEvents,
        clock: Clock,
        stats: ServerStats,
    ) -> None:
        self._registry = registry
        self._writer = writer
        self._authorizer = authorizer
        self._observations = observations
        self._events = events
        self._clock = clock
        self._stats = stats
        self._retries = writer.retries  # when shed Registers are told to come back

    def shed_early(self, message: CoapMessage) -> Reply | None:
        """A Register that comes while the backlog is full, shed on the receive path (issue 30 #4): before its query
        and links are parsed, before a task is made for it and before any per-device work, so that a node pushed far
        past its capacity spends its time admitting. Anything else (None) takes the handler's path."""
        if not self._writer.full or message.code != codes.POST or message.uri_path != "/rd":
            return None
        self._stats.registrations_shed += 1
        return self._shed()

    async def register(
        self,
        message: CoapMessage,
        payload: bytes,
        remote: Address,
        transport: str = UDP,
    ) -> Reply:
        query = parse_query(message.uri_query)
        if endpoint_name_in(query) is None:
            return _bad(f"register needs ep= (1-{MAX_ENDPOINT_NAME} printable characters)")
        version = query.get("lwm2m", "1.0")
        if version not in SUPPORTED_VERSIONS:
            return Reply(codes.PRECONDITION_FAILED, payload=f"lwm2m {version} not supported; use 1.1 or 1.0".encode())
        lifetime = _lifetime(query.get("lt"))
        if lifetime is None:
            return _bad("lt must be a positive integer")
        if self._writer.full:  # before the links are parsed: in a storm most Registers end here
            self._stats.registrations_shed += 1
            return self._shed()
        try:
            links = tuple(link for link in parse_links(payload) if not link.deleted)
        except LinkFormatError as error:
            return _bad(str(error))
        self._writer.backlog += 1  # until the batch that stores it is written
        self._retries.admitted(self._clock.now())
        reply = Reply(codes.INTERNAL_ERROR)
        try:
            reply = await self._admit(query, links, lifetime, remote, self._authorizer.identity(remote), transport)
        finally:
            if reply.code != codes.CREATED:
                self._writer.backlog -= 1
        return reply

    def _shed(self) -> Reply:
        """issue 16 #2: refuse instead of queueing; the device retries after Max-Age (RFC 7252 §5.9.3.4)."""
        max_age = coap_encode_uint(self._retries.retry_after(self._clock.now()))
        return Reply(codes.SERVICE_UNAVAILABLE, [(codes.MAX_AGE, max_age)])

    def _refuse(self, identity: str, endpoint_name: str, why: str) -> Reply:
        self._authorizer.refuse_register(identity, endpoint_name, why)
        return Reply(codes.FORBIDDEN, payload=why.encode())

    async def _admit(
        self,
        query: dict[str, str],
        links: tuple[ResourceLink, ...],
        lifetime: int,
        remote: Address,
        identity: PeerIdentity | None,
        transport: str,
    ) -> Reply:
        endpoint_name, version = query["ep"], query.get("lwm2m", "1.0")
        endpoint_type = query.get("et", "")
        gateway = query.get("gw", "")[:MAX_ENDPOINT_NAME]
        child = identity is not None and identity.name != endpoint_name and gateway == identity.name
        if identity is not None and (why := self._authorizer.register_refusal(identity, endpoint_name, gateway)):
            return self._refuse(identity.name, endpoint_name, why)
        if identity is None:
            admission = await self._events.admit(endpoint_name, endpoint_type)
        else:
            admission = await self._events.admit(endpoint_name, endpoint_type, identity.account_id)
        if admission is None:
            self._stats.refused += 1
            return Reply(codes.FORBIDDEN)
        if child and not admission.new:  # a gateway takes no registration its child made itself (or via another)
            assert identity is not None
            known = await self._registry.known(admission.device_id)
            if known is not None and known.registration.secure and known.registration.gateway != identity.name:
                return self._refuse(identity.name, endpoint_name, "the device registered itself over DTLS")
        if identity is None and not admission.new:  # a plain Register must not take over one made over DTLS
            known = await self._registry.known(admission.device_id)
            if known is not None and not self._authorizer.continues(known.registration, remote, "register"):
                self._stats.refused += 1
                return Reply(codes.FORBIDDEN)
        binding = query.get("b", "U")
        now = self._clock.now()
        registration = Registration(
            account_id=admission.account_id,
            device_id=admission.device_id,
            endpoint_name=endpoint_name,
            endpoint_type=endpoint_type,
            lifetime=lifetime,
            binding=binding,
            lwm2m_version=version,
            links=links,
            host=remote[0],
            port=remote[1],
            registered_at=now,
            updated_at=now,
            expires_at=self._registry.expires_at(now, lifetime),
            queue_mode="Q" in binding or "Q" in query,
            domain=query.get("d"),
            gateway=gateway,
            secure=identity is not None,
            transport=transport,
        )
        registry = self._registry
        async with registry.locks(admission.device_id):
            previous = registry.devices.get(admission.device_id)
            if previous is not None:
                # a Register for a known endpoint is a restart: its observations are gone (spec §2.1)
                registry.release(previous.registration.address, admission.device_id)
            device = Device(registration)
            for link in links:
                if link.aobs is not None:
                    device.observations[link.aobs.to_bytes(2, "big")] = Observation(path=link.path, auto=True)
            registry.hold(device)
            if not child:
                registry.note_gateway(registration)
            registry.map_address(remote, admission.device_id)
            # issue 16 #1: answered now; announced to the core and stored with the next batch
            self._writer.enqueue(device, fresh=True)
            self._stats.registrations += 1
            log.info(
                "registered %s (%s) from %s:%d, lifetime %d s",
                registration.endpoint_name,
                admission.device_id,
                *remote[:2],
                registration.lifetime,
            )
        location = [
            (codes.LOCATION_PATH, b"rd"),
            (codes.LOCATION_PATH, admission.account_id.encode()),
            (codes.LOCATION_PATH, admission.device_id.encode()),
        ]
        return Reply(codes.CREATED, location)

    async def update(
        self,
        device_id: str,
        message: CoapMessage,
        payload: bytes,
        remote: Address,
        transport: str = UDP,
    ) -> Reply:
        """An Update (the caller holds the device's lock)."""
        if self._writer.register_pending(device_id):
            await self._writer.settled(device_id)  # the core hears of the Register before the Update
        registry = self._registry
        device = await registry.known(device_id)
        if device is None:
            return Reply(codes.NOT_FOUND)  # the client registers afresh
        if not self._authorizer.continues(device.registration, remote, "update"):
            return Reply(codes.FORBIDDEN)
        query = parse_query(message.uri_query)
        current = device.registration
        lifetime = _lifetime(query.get("lt"), current.lifetime)
        if lifetime is None:
            return _bad("lt must be a positive integer")
        try:
            delta = parse_links(payload) if payload else []
        except LinkFormatError as error:
            return _bad(str(error))
        links, added = _merge_links(current.links, delta)
        binding = query.get("b", current.binding)
        now = self._clock.now()
        registration = msgspec.structs.replace(
            current,
            lifetime=lifetime,
            binding=binding,
            links=links,
            # the device is reached where its Update came from: over TCP that is the connection it came on
            # (RFC 8323 §3, LwM2M 1.1 Transport §6.4), so address and transport move together
            host=remote[0],
            port=remote[1],
            transport=transport,
            updated_at=now,
            expires_at=registry.expires_at(now, lifetime),
            endpoint_type=query.get("et", current.endpoint_type),
            queue_mode="Q" in binding or "Q" in query if ("b" in query or "Q" in query) else current.queue_mode,
        )
        if current.address != remote:
            registry.release(current.address, device_id)
        registry.map_address(remote, device_id)
        device.registration = registration
        registry.track(device)
        for link in added:
            if link.aobs is not None:
                device.observations[link.aobs.to_bytes(2, "big")] = Observation(path=link.path, auto=True)
        for token, observation in list(device.observations.items()):
            if not _covered(observation.path, links):  # its object, instance or resource is gone
                registry.end_observation(device, token)
                registry.missed.miss(token)  # a value it still sends is unknown here, not looked up and adopted again
                self._observations.forget_stored(token)
        self._stats.updates += 1
        self._writer.enqueue(device, fresh=False, changes=_changes(current, registration))
        await self._events.updated(registration, added)
        return Reply(codes.CHANGED)

    async def deregister(self, device_id: str, remote: Address) -> Reply:
        """A De-register (the caller holds the device's lock)."""
        await self._writer.settled(device_id)
        registry = self._registry
        known = await registry.known(device_id)
        if known is not None and not self._authorizer.continues(known.registration, remote, "de-register"):
            return Reply(codes.FORBIDDEN)
        device = registry.devices.get(device_id)
        if device is None:
            return Reply(codes.NOT_FOUND)
        registry.forget(device)
        if registry.store is not None:
            gone = device.registration
            event = new_event(gone.account_id, device_id, DEREGISTERED, self._clock.now())
            await registry.store.remove_registration(device_id, event=event)
        self._stats.deregistrations += 1
        registry.usage.count(device.registration.account_id, DELETED_REGISTRATIONS)
        log.info("de-registered %s (%s)", device.registration.endpoint_name, device_id)
        await self._events.deregistered(device.registration)
        return Reply(codes.DELETED)


# what an Update may change, as Pelion's device event names it (`changes`): an Update that changes none of these (a
# lifetime refresh) records no event (issue 32 #3)
_WATCHED = ("lifetime", "binding", "transport", "endpoint_type")


def _changes(before: Registration, after: Registration) -> dict[str, str]:
    changed = {name: str(getattr(after, name)) for name in _WATCHED if getattr(before, name) != getattr(after, name)}
    if before.address != after.address:
        changed["address"] = f"{after.address[0]}:{after.address[1]}"
    if before.links != after.links:
        changed["resources"] = str(len(after.links))
    if before.queue_mode != after.queue_mode:
        changed["queue_mode"] = str(after.queue_mode).lower()
    return changed


def _bad(reason: str) -> Reply:
    return Reply(codes.BAD_REQUEST, payload=reason.encode()[:200])


def _lifetime(text: str | None, default: int = DEFAULT_LIFETIME) -> int | None:
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < MIN_LIFETIME:
        return None
    return min(int(text), MAX_LIFETIME)


def _is_delta(links: list[ResourceLink]) -> bool:
    """The Pelion client's Update payload is a delta of per-resource links (`;d` deletes, lwm2m-device-side.md §8);
    an LwM2M object list names objects and instances only (LwM2M 1.1 §6.2.1), never a resource."""
    return any(link.deleted or link.path.count("/") >= 3 for link in links)


def _merge_links(
    current: tuple[ResourceLink, ...], delta: list[ResourceLink]
) -> tuple[tuple[ResourceLink, ...], tuple[ResourceLink, ...]]:
    """Apply an Update payload. An object list replaces the registered one (LwM2M 1.1 §6.2.2, as Leshan's
    RegistrationUpdate does); the Pelion client's delta is merged. Returns (links, links not known before)."""
    if not delta:
        return current, ()
    known = {link.path: link for link in current}
    if not _is_delta(delta):
        fresh = {link.path: link for link in delta}
        return tuple(fresh.values()), tuple(link for path, link in fresh.items() if path not in known)
    added: list[ResourceLink] = []
    for link in delta:
        if link.deleted:
            known.pop(link.path, None)
            continue
        if link.path not in known:
            added.append(link)
        known[link.path] = link
    return tuple(known.values()), tuple(added)


def _covered(path: str, links: tuple[ResourceLink, ...]) -> bool:
    """Is `path` a registered link or inside one (or, for an object-level observation, above one)?"""
    return any(
        path == link.path or path.startswith(link.path + "/") or link.path.startswith(path + "/") for link in links
    )
