"""The LwM2M server: the registration interface, device requests and observations over its CoAP listeners.

A thin façade on Eclipse Leshan's shape (`leshan-lwm2m-server`): it turns CoAP traffic into `DeviceEvents` calls on
the core and offers the core the `DeviceGateway` operations, and it wires the parts that do the work — the listeners
(listeners.py), the registration handler (registration_handler.py) and its authorizer (authorizer.py), the registry
of held registrations (registry.py) and their batched writer (registration_writer.py), the observation service
(observations.py), Send (send.py) and expiry (registration_expiry.py). Registrations and observations persist
through a port the LwM2M layer defines (persistence.py) and the store implements.
Facts it follows: lwm2m-device-side.md §10.
"""

from __future__ import annotations

from typing import Any

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceError, DeviceResponse, NotRegistered
from devicehub.domain.model import Registration
from devicehub.domain.object_model import ObjectDefinition
from devicehub.domain.ports import DeviceEvents
from devicehub.domain.registration import UDP
from devicehub.domain.usage import (
    HANDSHAKES,
    PROXY_ERROR,
    PROXY_SUCCESS,
    SUBSCRIPTION_ERROR,
    SUBSCRIPTION_SUCCESS,
    TRANSACTIONS,
)
from devicehub.lwm2m import codes
from devicehub.lwm2m.authorizer import Authorizer
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.coap.parameters import DEFAULT_LIMITS, Limits
from devicehub.lwm2m.content import split_values
from devicehub.lwm2m.dtls import DtlsListener
from devicehub.lwm2m.file_server import FileServer
from devicehub.lwm2m.listeners import Listeners
from devicehub.lwm2m.observations import ObservationService, response_of
from devicehub.lwm2m.persistence import RegistrationPersistence
from devicehub.lwm2m.registration_expiry import RegistrationExpiry
from devicehub.lwm2m.registration_handler import RegistrationHandler
from devicehub.lwm2m.registration_writer import RegistrationWriter
from devicehub.lwm2m.registry import Device, Registry
from devicehub.lwm2m.security import PeerIdentity
from devicehub.lwm2m.send import SendHandler
from devicehub.lwm2m.server_stats import ServerStats, vars_of
from devicehub.lwm2m.tcp import StreamListener
from devicehub.lwm2m.tls_stream import TlsAcceptor

# issue 16 #2: registrations admitted but not yet stored beyond which a Register is shed with 5.03 and a Max-Age
# (RFC 7252 §5.9.3.4: the server says when to retry) booked in the node's retry calendar (retry_calendar.py)
MAX_REGISTRATION_BACKLOG = 2000


class LwM2MServer:
    """Implements domain.ports.DeviceGateway on top of the CoAP listeners."""

    def __init__(
        self,
        events: DeviceEvents,
        clock: Clock,
        *,
        expiry_grace: float = 93.0,
        store: RegistrationPersistence | None = None,
        allow_nosec: bool = True,
        limits: Limits = DEFAULT_LIMITS,
        max_backlog: int = MAX_REGISTRATION_BACKLOG,
    ) -> None:
        self.stats = ServerStats()
        self.files: FileServer | None = None  # issue 33: the firmware file server on these listeners, once set
        self.registry = Registry(events, clock, store, expiry_grace)
        self._writer = RegistrationWriter(self.registry, events, clock, self.stats, max_backlog)
        self.listeners = Listeners(clock, limits, self.registry.lanes, allow_nosec=allow_nosec)
        self._authorizer = Authorizer(
            self.stats, self.registry.gateways, self.listeners.has_psk, allow_nosec=allow_nosec
        )
        self._observations = ObservationService(
            self.registry, self._writer, self.listeners, self._authorizer, events, clock, self.stats
        )
        self._registrations = RegistrationHandler(
            self.registry, self._writer, self._authorizer, self._observations, events, clock, self.stats
        )
        self._send = SendHandler(self.registry, self._writer, self._authorizer, self.stats)
        self.listeners.route(
            self._handle,
            self._observations.notification,
            self._observations.lane_values,
            self._registrations.shed_early,
        )
        self._expiry = RegistrationExpiry(self.registry, self._writer, events, clock, self.stats, self.listeners.sweep)

    # ---- lifecycle --------------------------------------------------------------------------------
    async def start(self, host: str, port: int) -> None:
        await self.listeners.start(host, port)
        self._expiry.start()

    async def start_secure(self, host: str, port: int, certificate: tuple[bytes, bytes], **options: Any) -> None:
        await self.listeners.start_secure(host, port, certificate, **options)
        assert self.listeners.dtls is not None
        self.listeners.dtls.on_handshake = self._handshaken

    async def start_tcp(self, host: str, port: int) -> StreamListener:
        return await self.listeners.start_tcp(host, port)

    async def start_secure_tcp(
        self, host: str, port: int, certificate: tuple[bytes, bytes], **options: Any
    ) -> StreamListener:
        listener = await self.listeners.start_secure_tcp(host, port, certificate, **options)
        assert listener.tls is not None
        listener.tls.on_handshake = self._handshaken
        return listener

    def _handshaken(self, identity: PeerIdentity) -> None:
        """issue 32 #3: a handshake authenticated with one of an account's credentials (GET /v3/metrics)."""
        self.registry.usage.count(identity.account_id, HANDSHAKES)

    @property
    def dtls(self) -> DtlsListener | None:
        return self.listeners.dtls

    @property
    def coaps_tcp(self) -> TlsAcceptor | None:
        """The TLS side of the `coaps+tcp://` listener: its keyring, bounds and figures."""
        return self.listeners.coaps_tcp

    @property
    def allow_nosec(self) -> bool:
        return self._authorizer.allow_nosec

    @property
    def address(self) -> Address:
        assert self.listeners.plain is not None, "start() first"
        return self.listeners.plain.address

    async def restore(self) -> None:
        """Take up the stored registrations (after the core has started): requests reach those devices at once.
        Without it they would still be taken up lazily, at the device's next Update or notification."""
        await self.registry.restore()

    async def stop(self) -> None:
        await self._expiry.stop()
        await self._observations.cancel_completions()
        await self.listeners.close()
        await self._writer.close()  # a graceful stop stores every registration it answered
        await self._observations.store_freshness()

    async def settled(self, device_id: str | None = None) -> None:
        await self._writer.settled(device_id)

    async def flush(self) -> None:
        """Return once every registration answered so far is stored (and announced to the core)."""
        await self._writer.flush()

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {
            "lwm2m_registered_devices": len(self.registry.devices),
            "lwm2m_registration_backlog": self._writer.backlog,
            "lwm2m_token_lookups_running": len(self._observations.lookups),
            "lwm2m_missed_tokens": len(self.registry.missed),
        }
        for name, value in vars_of(self.stats).items():
            values[f"lwm2m_{name}"] = value
        self.listeners.metrics(values)
        values["lwm2m_locks"] = len(self.registry.locks)
        self.listeners.socket_metrics(values)
        return values

    # ---- DeviceGateway ---------------------------------------------------------------------------------
    def registration(self, device_id: str) -> Registration | None:
        device = self.registry.devices.get(device_id)
        return None if device is None else device.registration

    def connected(self, registration: Registration) -> bool:
        return self.listeners.connected(registration)

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
        usage, account_id = self.registry.usage, device.registration.account_id
        usage.count(account_id, TRANSACTIONS)  # issue 32 #3: a request sent to a device (GET /v3/metrics)
        try:
            response = response_of(
                await self.listeners.endpoint_for(device.registration).request(
                    device.registration.address, codes.METHODS[method], options, payload
                )
            )
        except DeviceError:
            usage.count(account_id, PROXY_ERROR)
            raise
        usage.count(account_id, PROXY_SUCCESS if response.success else PROXY_ERROR)
        return response

    async def observe(self, device_id: str, path: str, accept: int | None = None) -> DeviceResponse:
        device = self._require(device_id)
        usage, account_id = self.registry.usage, device.registration.account_id
        usage.count(account_id, TRANSACTIONS)
        try:
            response = await self._observations.observe(device, path, accept)
        except DeviceError:
            usage.count(account_id, SUBSCRIPTION_ERROR)
            raise
        usage.count(account_id, SUBSCRIPTION_SUCCESS if response.success else SUBSCRIPTION_ERROR)
        return response

    def split_values(
        self,
        path: str,
        content_format: int | None,
        payload: bytes,
        content_type: str,
        definition: ObjectDefinition | None = None,
    ) -> list[tuple[str, bytes, str]]:
        return split_values(path, content_format, payload, content_type, definition)

    def observed(self, device_id: str, path: str) -> bool:
        """Whether `path` has an observation this server requested (pending or established)."""
        device = self.registry.devices.get(device_id)
        return device is not None and self._observations.requested(device, path) is not None

    def observing(self, device_id: str, path: str) -> bool:
        """Whether `path` has an established observation this server requested: its Observe was answered with
        success (which sets the stream's number) and nothing removed it since; a re-Observe under way clears
        the number until its answer comes."""
        device = self.registry.devices.get(device_id)
        observation = None if device is None else self._observations.requested(device, path)
        return observation is not None and observation.order.last_seq is not None

    async def cancel_observe(self, device_id: str, path: str) -> None:
        device = self.registry.devices.get(device_id)
        if device is not None:
            await self._observations.cancel(device, path)

    async def drop(self, device_id: str) -> bool:
        """The device was removed from the directory (`DELETE /v3/devices/{id}`): forget its registration."""
        registry = self.registry
        async with registry.locks(device_id):
            await self._writer.settled(device_id)
            device = await registry.known(device_id)  # one kept in the store (restart, another node) counts too
            if device is None:
                return False
            registry.forget(device)
            if registry.store is not None:  # so that no node accepts its next Update
                await registry.store.remove_registration(device_id)
            return True

    def _require(self, device_id: str) -> Device:
        device = self.registry.devices.get(device_id)
        if device is None:
            raise NotRegistered(f"device {device_id} is not registered")
        return device

    # ---- incoming messages ------------------------------------------------------------------------------
    async def _handle(
        self,
        message: CoapMessage,
        payload: bytes,
        remote: Address,
        transport: str = UDP,
    ) -> Reply | None:
        if self._authorizer.plain_refused(remote):
            return Reply(codes.FORBIDDEN, payload=b"DTLS required")
        segments = [s for s in message.uri_path.split("/") if s]
        if segments[:1] == ["rd"]:
            if message.code == codes.POST and len(segments) == 1:
                return await self._registrations.register(message, payload, remote, transport)
            if len(segments) >= 2 and message.code in (codes.POST, codes.DELETE):
                async with self.registry.locks(segments[-1]):
                    if message.code == codes.POST:
                        return await self._registrations.update(segments[-1], message, payload, remote, transport)
                    return await self._registrations.deregister(segments[-1], remote)
            return Reply(codes.METHOD_NOT_ALLOWED)
        if segments == ["dp"] and message.code == codes.POST:
            return self._send.send(message, payload, remote)
        if self.files is not None and self.files.handles(segments):  # issue 33: firmware packages (Block2)
            return await self.files.serve(message, segments, remote)
        return Reply(codes.NOT_FOUND)
