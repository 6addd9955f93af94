"""The LwM2M server's parts wired as `LwM2MServer` wires them, on fakes of their ports: the core's `DeviceEvents`, the
store's `RegistrationPersistence` and a manual clock. No socket is opened (no listener is started)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from devicehub._core import CoapMessage, coap_decode, coap_encode, coap_encode_uint
from devicehub.clock import ManualClock
from devicehub.domain.device_log import DeviceEventRecord
from devicehub.domain.model import ObservationRecord, Registration, ResourceLink
from devicehub.domain.registration import Admission
from devicehub.errors import Unavailable
from devicehub.lwm2m import codes
from devicehub.lwm2m.authorizer import Authorizer
from devicehub.lwm2m.coap.parameters import DEFAULT_LIMITS
from devicehub.lwm2m.listeners import Listeners
from devicehub.lwm2m.observations import ObservationService
from devicehub.lwm2m.registration_handler import RegistrationHandler
from devicehub.lwm2m.registration_writer import RegistrationWriter
from devicehub.lwm2m.registry import Registry
from devicehub.lwm2m.security import PeerIdentity
from devicehub.lwm2m.server_stats import ServerStats

ACCOUNT = "acc-1"
DEVICE = "dev-1"


@dataclass
class RecordingEvents:
    """`DeviceEvents` that admits every endpoint into ACCOUNT (`refuse`: none) and records what it is told."""

    refuse: bool = False
    new: bool = True
    calls: list[tuple[str, object]] = field(default_factory=list)
    values: list[tuple[str, str, int | None, bytes, int | None]] = field(default_factory=list)

    async def admit(self, endpoint_name: str, endpoint_type: str, account_id: str | None = None) -> Admission | None:
        self.calls.append(("admit", (endpoint_name, account_id)))
        if self.refuse:
            return None
        return Admission(account_id=account_id or ACCOUNT, device_id=f"dev-{endpoint_name}", new=self.new)

    async def registered(self, registration: Registration) -> None:
        self.calls.append(("registered", registration.device_id))

    async def registered_many(self, registrations: Sequence[Registration]) -> None:
        for registration in registrations:
            self.calls.append(("registered", registration.device_id))

    async def resumed(self, registration: Registration) -> None:
        self.calls.append(("resumed", registration.device_id))

    async def updated(self, registration: Registration, added: tuple[ResourceLink, ...]) -> None:
        self.calls.append(("updated", tuple(link.path for link in added)))

    async def moved(self, registration: Registration) -> None:
        self.calls.append(("moved", registration.device_id))

    async def deregistered(self, registration: Registration) -> None:
        self.calls.append(("deregistered", registration.device_id))

    async def expired(self, registration: Registration) -> None:
        self.calls.append(("expired", registration.device_id))

    def notification(
        self, device_id: str, path: str, content_format: int | None, payload: bytes, observe_seq: int | None
    ) -> None:
        self.values.append((device_id, path, content_format, payload, observe_seq))

    def notifications(self, values: Sequence[tuple[str, str, int | None, bytes, int | None]]) -> None:
        self.values.extend(values)

    def named(self, kind: str) -> list[object]:
        return [what for call, what in self.calls if call == kind]


@dataclass
class MemoryPersistence:
    """`RegistrationPersistence` in dicts, counting observation lookups."""

    registrations: dict[str, Registration] = field(default_factory=dict)
    observations: dict[bytes, ObservationRecord] = field(default_factory=dict)
    events: list[DeviceEventRecord] = field(default_factory=list)  # lifecycle events written with the records
    lookups: int = 0
    failing: bool = False  # observation lookups raise Unavailable (an outage, a time-out)

    async def put_registrations(
        self,
        registrations: Sequence[Registration],
        observations: Sequence[ObservationRecord] = (),
        fresh: Sequence[str] = (),
        events: Sequence[DeviceEventRecord] = (),
    ) -> None:
        self.events += events
        for token in [t for t, o in self.observations.items() if o.device_id in fresh]:
            del self.observations[token]
        self.registrations.update((r.device_id, r) for r in registrations)
        self.observations.update((o.token, o) for o in observations)

    async def get_registration(self, device_id: str) -> Registration | None:
        return self.registrations.get(device_id)

    async def list_registrations(self) -> list[Registration]:
        return list(self.registrations.values())

    async def registrations_expiring(self, now: float, limit: int = 1000) -> list[Registration]:
        return sorted((r for r in self.registrations.values() if r.expires_at < now), key=lambda r: r.expires_at)

    async def remove_registration(
        self, device_id: str, updated_at: float | None = None, event: DeviceEventRecord | None = None
    ) -> bool:
        record = self.registrations.get(device_id)
        if record is None or (updated_at is not None and record.updated_at != updated_at):
            return False
        del self.registrations[device_id]
        if event is not None:
            self.events.append(event)
        return True

    async def put_observation(self, observation: ObservationRecord) -> None:
        self.observations[observation.token] = observation

    async def get_observation(self, token: bytes) -> ObservationRecord | None:
        self.lookups += 1
        if self.failing:
            raise Unavailable("store unavailable")
        return self.observations.get(token)

    async def device_observations(self, device_id: str) -> list[ObservationRecord]:
        return [o for o in self.observations.values() if o.device_id == device_id]

    async def remove_observation(self, token: bytes) -> None:
        self.observations.pop(token, None)


class Parts:
    """Registry, writer, authorizer, observation service and registration handler on the fakes."""

    def __init__(
        self,
        *,
        store: MemoryPersistence | None = None,
        allow_nosec: bool = True,
        max_backlog: int = 100,
        events: RecordingEvents | None = None,
    ) -> None:
        self.clock = ManualClock()
        self.events = RecordingEvents() if events is None else events
        self.store = store
        self.stats = ServerStats()
        self.registry = Registry(self.events, self.clock, store, expiry_grace=93.0)
        self.writer = RegistrationWriter(self.registry, self.events, self.clock, self.stats, max_backlog)
        self.listeners = Listeners(self.clock, DEFAULT_LIMITS, self.registry.lanes, allow_nosec=allow_nosec)
        self.psks: set[str] = set()
        self.authorizer = Authorizer(
            self.stats, self.registry.gateways, self.psks.__contains__, allow_nosec=allow_nosec
        )
        self.observations = ObservationService(
            self.registry, self.writer, self.listeners, self.authorizer, self.events, self.clock, self.stats
        )
        self.handler = RegistrationHandler(
            self.registry, self.writer, self.authorizer, self.observations, self.events, self.clock, self.stats
        )


def identity(name: str, account_id: str = ACCOUNT) -> PeerIdentity:
    return PeerIdentity(name=name, account_id=account_id, method="psk", credential=name)


def register_message(query: str, links: bytes = b"</3/0>,</3303/0>") -> tuple[CoapMessage, bytes]:
    options = [(codes.URI_PATH, b"rd"), *((codes.URI_QUERY, item.encode()) for item in query.split("&"))]
    return coap_decode(coap_encode(codes.CON, codes.POST, 1, b"t1", options, links)), links


def update_message(location: str, query: str = "", links: bytes = b"") -> tuple[CoapMessage, bytes]:
    options = [(codes.URI_PATH, segment.encode()) for segment in location.split("/")]
    options += [(codes.URI_QUERY, item.encode()) for item in query.split("&") if item]
    return coap_decode(coap_encode(codes.CON, codes.POST, 2, b"t2", options, links)), links


def notification(token: bytes, seq: int, payload: bytes = b"21.5", code: int = codes.CONTENT) -> CoapMessage:
    options = [(codes.OBSERVE, coap_encode_uint(seq)), (codes.CONTENT_FORMAT, b"")]
    return coap_decode(coap_encode(codes.NON, code, 7, token, options, payload))


def location_of(options: Sequence[tuple[int, bytes]]) -> str:
    return "/".join(value.decode() for number, value in options if number == codes.LOCATION_PATH)
