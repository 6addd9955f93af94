"""The LwM2M server: registration interface, device requests and observations over one CoAP endpoint.

It turns CoAP traffic into `DeviceEvents` calls on the core and offers the core the `DeviceGateway` operations.
Registrations live in memory (a device that talks to a restarted server gets 4.04 to its Update and registers
afresh, as every client seen does: lwm2m-device-side.md §2, §8). Facts it follows: lwm2m-device-side.md §10.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.clock import Clock
from devicehub.lwm2m import codes
from devicehub.lwm2m.content import ContentError, decode_values, encode_text_value
from devicehub.lwm2m.errors import DeviceError, NotRegistered
from devicehub.lwm2m.links import LinkFormatError, parse_links
from devicehub.lwm2m.ports import DeviceEvents, DeviceResponse, Registration, ResourceLink
from devicehub.lwm2m.transport import Address, CoapEndpoint, Reply

log = logging.getLogger("devicehub.lwm2m")

DEFAULT_LIFETIME = 86_400  # LwM2M default `lt`
MAX_LIFETIME = 72 * 3600  # Pelion caps the lifetime at 72 h (lwm2m-device-side.md §2)
MIN_LIFETIME = 1
SUPPORTED_VERSIONS = ("1.0", "1.1")
MAX_ENDPOINT_NAME = 64
OBSERVE_FRESHNESS = 128.0  # RFC 7641 §3.4: after this long any sequence number is taken as newer
EXPIRY_CHECK_INTERVAL = 1.0


@dataclass(slots=True)
class _Observation:
    path: str
    auto: bool  # adopted from the device's `aobs` (Pelion auto-observation), not requested by us
    last_seq: int | None = None
    last_at: float = 0.0


@dataclass(slots=True)
class _Device:
    registration: Registration
    observations: dict[bytes, _Observation] = field(default_factory=dict)  # token → observation

    def token_for(self, path: str) -> bytes | None:
        for token, observation in self.observations.items():
            if observation.path == path:
                return token
        return None


@dataclass(slots=True)
class ServerStats:
    registrations: int = 0
    updates: int = 0
    deregistrations: int = 0
    expirations: int = 0
    refused: int = 0
    notifications: int = 0
    stale_notifications: int = 0


class LwM2MServer:
    """Implements domain.ports.DeviceGateway on top of a CoapEndpoint."""

    def __init__(self, events: DeviceEvents, clock: Clock, *, expiry_grace: float = 93.0) -> None:
        self._events = events
        self._clock = clock
        self._expiry_grace = expiry_grace
        self._endpoint: CoapEndpoint | None = None
        self._devices: dict[str, _Device] = {}
        self._by_address: dict[Address, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._expiry: asyncio.Task[None] | None = None
        self.stats = ServerStats()

    # ---- lifecycle --------------------------------------------------------------------------------
    async def start(self, host: str, port: int) -> None:
        self._endpoint = await CoapEndpoint.bind(host, port, self._clock, self._handle, self._notification)
        self._expiry = asyncio.create_task(self._expire_forever(), name="lwm2m-expiry")

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        if self._endpoint is not None:
            await self._endpoint.close()

    @property
    def address(self) -> Address:
        assert self._endpoint is not None, "start() first"
        return self._endpoint.address

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {"lwm2m_registered_devices": len(self._devices)}
        for name, value in vars_of(self.stats).items():
            values[f"lwm2m_{name}"] = value
        if self._endpoint is not None:
            for name, value in vars_of(self._endpoint.stats).items():
                values[f"coap_{name}"] = value
        return values

    # ---- DeviceGateway ---------------------------------------------------------------------------------
    def registration(self, device_id: str) -> Registration | None:
        device = self._devices.get(device_id)
        return None if device is None else device.registration

    async def request(
        self,
        device_id: str,
        method: str,
        uri: str,
        payload: bytes = b"",
        content_format: int | None = None,
        accept: int | None = None,
    ) -> DeviceResponse:
        device = self._require(device_id)
        path, _, query = uri.partition("?")
        options = codes.path_options(path) + codes.query_options(query)
        if content_format is not None:
            options.append((codes.CONTENT_FORMAT, coap_encode_uint(content_format)))
        if accept is not None:
            options.append((codes.ACCEPT, coap_encode_uint(accept)))
        response = await self._endpoint_or_fail().request(
            device.registration.address, codes.METHODS[method], options, payload
        )
        return _response(response)

    async def observe(self, device_id: str, path: str, accept: int | None = None) -> DeviceResponse:
        device = self._require(device_id)
        endpoint = self._endpoint_or_fail()
        # RFC 7641 §4.1: observing again with the same token re-registers instead of adding a second stream
        token = device.token_for(path)
        if token is None:
            token = endpoint.new_token()
            device.observations[token] = _Observation(path=path, auto=False)
        options = [(codes.OBSERVE, b""), *codes.path_options(path)]
        if accept is not None:
            options.append((codes.ACCEPT, coap_encode_uint(accept)))
        try:
            response = await endpoint.request(device.registration.address, codes.GET, options, token=token)
        except DeviceError:
            self._forget_observation(device_id, token, only_ours=True)
            raise
        if response.observe is None or response.code >> 5 != 2:
            self._forget_observation(device_id, token, only_ours=True)
            return _response(response)
        observation = device.observations.get(token)
        # a notification that overtook this response while it was being handled is newer: keep it
        if observation is not None and observation.last_seq is None:
            observation.last_seq, observation.last_at = response.observe, self._clock.now()
            if response.payload:
                self.stats.notifications += 1
                self._events.notification(device_id, path, response.content_format, response.payload, response.observe)
        return _response(response)

    async def cancel_observe(self, device_id: str, path: str) -> None:
        """Proactive cancel: GET with Observe=1 and the same token (RFC 7641 §3.6); auto-observations stay."""
        device = self._devices.get(device_id)
        if device is None:
            return
        token = device.token_for(path)
        if token is None or device.observations[token].auto:
            return
        del device.observations[token]
        options = [(codes.OBSERVE, coap_encode_uint(1)), *codes.path_options(path)]
        try:
            await self._endpoint_or_fail().request(device.registration.address, codes.GET, options, token=token)
        except DeviceError as error:
            log.debug("cancel of %s%s not answered: %s", device_id, path, error)

    # ---- incoming requests ------------------------------------------------------------------------------
    async def _handle(self, message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
        segments = [s for s in message.uri_path.split("/") if s]
        if segments[:1] == ["rd"]:
            if message.code == codes.POST and len(segments) == 1:
                return await self._register(message, payload, remote)
            if len(segments) >= 2 and message.code in (codes.POST, codes.DELETE):
                lock = self._locks.setdefault(segments[-1], asyncio.Lock())
                async with lock:
                    if message.code == codes.POST:
                        return await self._update(segments[-1], message, payload, remote)
                    return await self._deregister(segments[-1])
            return Reply(codes.METHOD_NOT_ALLOWED)
        if segments == ["dp"] and message.code == codes.POST:
            return self._send_operation(message, payload, remote)
        return Reply(codes.NOT_FOUND)

    async def _register(self, message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        query = _query(message.uri_query)
        endpoint_name = query.get("ep", "")
        if not endpoint_name or len(endpoint_name) > MAX_ENDPOINT_NAME or not endpoint_name.isprintable():
            return _bad("register needs ep= (1-64 printable characters)")
        version = query.get("lwm2m", "1.0")
        if version not in SUPPORTED_VERSIONS:
            return Reply(codes.PRECONDITION_FAILED, payload=f"lwm2m {version} not supported; use 1.1 or 1.0".encode())
        lifetime = _lifetime(query.get("lt"))
        if lifetime is None:
            return _bad("lt must be a positive integer")
        try:
            links = tuple(link for link in parse_links(payload) if not link.deleted)
        except LinkFormatError as error:
            return _bad(str(error))
        endpoint_type = query.get("et", "")
        admission = await self._events.admit(endpoint_name, endpoint_type)
        if admission is None:
            self.stats.refused += 1
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
            address=remote,
            registered_at=now,
            updated_at=now,
            queue_mode="Q" in binding or "Q" in query,
            domain=query.get("d"),
        )
        lock = self._locks.setdefault(admission.device_id, asyncio.Lock())
        async with lock:
            previous = self._devices.get(admission.device_id)
            if previous is not None:
                # a Register for a known endpoint is a restart: its observations are gone (spec §2.1)
                self._by_address.pop(previous.registration.address, None)
            device = _Device(registration)
            for link in links:
                if link.aobs is not None:
                    device.observations[link.aobs.to_bytes(2, "big")] = _Observation(path=link.path, auto=True)
            self._devices[admission.device_id] = device
            self._by_address[remote] = admission.device_id
            try:
                await self._events.registered(registration)
            except BaseException:
                # issue 14 #1: a failed registration leaves no trace; the previous one (if any) stands
                self._by_address.pop(remote, None)
                if previous is None:
                    self._devices.pop(admission.device_id, None)
                else:
                    self._devices[admission.device_id] = previous
                    self._by_address[previous.registration.address] = admission.device_id
                raise
            self.stats.registrations += 1
        location = [
            (codes.LOCATION_PATH, b"rd"),
            (codes.LOCATION_PATH, admission.account_id.encode()),
            (codes.LOCATION_PATH, admission.device_id.encode()),
        ]
        return Reply(codes.CREATED, location)

    async def _update(self, device_id: str, message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        device = self._devices.get(device_id)
        if device is None:
            return Reply(codes.NOT_FOUND)  # the client registers afresh
        query = _query(message.uri_query)
        current = device.registration
        lifetime = _lifetime(query.get("lt"), current.lifetime)
        if lifetime is None:
            return _bad("lt must be a positive integer")
        try:
            delta = parse_links(payload) if payload else []
        except LinkFormatError as error:
            return _bad(str(error))
        links, added = _merge(current.links, delta)
        binding = query.get("b", current.binding)
        registration = replace(
            current,
            lifetime=lifetime,
            binding=binding,
            links=links,
            address=remote,
            updated_at=self._clock.now(),
            endpoint_type=query.get("et", current.endpoint_type),
            queue_mode="Q" in binding or "Q" in query if ("b" in query or "Q" in query) else current.queue_mode,
        )
        if current.address != remote:
            self._by_address.pop(current.address, None)
        self._by_address[remote] = device_id
        device.registration = registration
        for link in added:
            if link.aobs is not None:
                device.observations[link.aobs.to_bytes(2, "big")] = _Observation(path=link.path, auto=True)
        for token, observation in list(device.observations.items()):
            if not _covered(observation.path, links):  # its object, instance or resource is gone
                del device.observations[token]
        self.stats.updates += 1
        await self._events.updated(registration, added)
        return Reply(codes.CHANGED)

    async def _deregister(self, device_id: str) -> Reply:
        device = self._devices.pop(device_id, None)
        if device is None:
            return Reply(codes.NOT_FOUND)
        self._by_address.pop(device.registration.address, None)
        self.stats.deregistrations += 1
        await self._events.deregistered(device.registration)
        return Reply(codes.DELETED)

    def _send_operation(self, message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        """LwM2M 1.1 Send (`POST /dp`): each value is taken as a notification of its path."""
        device_id = self._by_address.get(remote)
        if device_id is None:
            return Reply(codes.FORBIDDEN)
        try:
            values = decode_values(message.content_format, payload, "/")
        except ContentError as error:
            return _bad(str(error))
        for path, value in values.items():
            self.stats.notifications += 1
            self._events.notification(device_id, path, 0, encode_text_value(value), None)
        return Reply(codes.CHANGED)

    # ---- notifications --------------------------------------------------------------------------------
    def _notification(self, message: CoapMessage, remote: Address) -> bool:
        device_id = self._by_address.get(remote)
        device = self._devices.get(device_id) if device_id is not None else None
        if device is None:
            return False
        observation = device.observations.get(message.token)
        if observation is None:
            return False
        if message.code >> 5 != 2:
            del device.observations[message.token]  # an error response ends the observation (RFC 7641 §3.2)
            return True
        now = self._clock.now()
        seq = message.observe
        if seq is not None and observation.last_seq is not None and not _newer(observation, seq, now):
            self.stats.stale_notifications += 1
            return True  # acknowledged, but older than what we have (RFC 7641 §3.4)
        if seq is not None:
            observation.last_seq, observation.last_at = seq, now
        self.stats.notifications += 1
        self._events.notification(
            device.registration.device_id, observation.path, message.content_format, message.payload, seq
        )
        return True

    # ---- expiry -----------------------------------------------------------------------------------------
    async def _expire_forever(self) -> None:
        while True:
            await self._clock.sleep(EXPIRY_CHECK_INTERVAL)
            now = self._clock.now()
            for device_id, device in list(self._devices.items()):
                registration = device.registration
                if now > registration.updated_at + registration.lifetime + self._expiry_grace:
                    await self._expire(device_id, registration)

    async def _expire(self, device_id: str, registration: Registration) -> None:
        async with self._locks.setdefault(device_id, asyncio.Lock()):
            device = self._devices.get(device_id)
            if device is None or device.registration is not registration:
                return  # it updated meanwhile
            del self._devices[device_id]
            self._by_address.pop(registration.address, None)
            self.stats.expirations += 1
            log.info("registration of %s (%s) expired", registration.endpoint_name, device_id)
            try:
                await self._events.expired(registration)
            except Exception:
                log.exception("expiry handling failed for %s", device_id)

    # ---- helpers ----------------------------------------------------------------------------------------
    def _require(self, device_id: str) -> _Device:
        device = self._devices.get(device_id)
        if device is None:
            raise NotRegistered(f"device {device_id} is not registered")
        return device

    def _endpoint_or_fail(self) -> CoapEndpoint:
        if self._endpoint is None:
            raise NotRegistered("server stopped")
        return self._endpoint

    def _forget_observation(self, device_id: str, token: bytes, *, only_ours: bool) -> None:
        device = self._devices.get(device_id)
        if device is None:
            return
        observation = device.observations.get(token)
        if observation is not None and not (only_ours and observation.auto):
            del device.observations[token]


def vars_of(stats: object) -> dict[str, float]:
    return {name: getattr(stats, name) for name in stats.__slots__}  # type: ignore[attr-defined]


def _response(message: CoapMessage) -> DeviceResponse:
    return DeviceResponse(
        code=message.code, content_format=message.content_format, payload=message.payload, observe=message.observe
    )


def _bad(reason: str) -> Reply:
    return Reply(codes.BAD_REQUEST, payload=reason.encode()[:200])


def _query(items: list[str]) -> dict[str, str]:
    """Uri-Query items as a dict; a flag without `=` (`Q`) maps to ''."""
    query: dict[str, str] = {}
    for item in items:
        for part in item.split("&"):  # tolerate clients that send one `&`-joined option
            name, _, value = part.partition("=")
            if name:
                query[name] = value
    return query


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


def _merge(
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


def _newer(observation: _Observation, seq: int, now: float) -> bool:
    """RFC 7641 §3.4: is `seq` newer than the last sequence number seen?"""
    last = observation.last_seq
    assert last is not None
    return (
        (last < seq and seq - last < 1 << 23)
        or (last > seq and last - seq > 1 << 23)
        or (now > observation.last_at + OBSERVE_FRESHNESS)
    )
