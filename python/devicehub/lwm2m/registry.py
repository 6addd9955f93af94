"""The registrations and observations this node holds: by device id and by address, with what they arm and expire."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from devicehub._core import ObserveLane, ObserveOrder
from devicehub.clock import Clock
from devicehub.domain.model import ObservationRecord, Registration
from devicehub.domain.ports import DeviceEvents
from devicehub.domain.usage import UsageMeter
from devicehub.locks import KeyedLocks
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.expiry import ExpiryHeap
from devicehub.lwm2m.persistence import RegistrationPersistence
from devicehub.lwm2m.records import observation_record, registration_of

# a notification whose token this node does not hold is looked up in the store; a miss is remembered this long (this
# many at most), so a flood of made-up tokens is not a flood of store reads
MISSED_TOKEN_TTL = 5.0
MAX_MISSED_TOKENS = 10_000


@dataclass(slots=True)
class Observation:
    path: str
    auto: bool  # adopted from the device's `aobs` (Pelion auto-observation), not requested by us
    # the order of its notifications (RFC 7641 §3.4): the Rust object the lane moves on too, so both paths ask one
    # owner (issue 29 #6); kept for the observation's life, a new stream restarts it (the lane may hold it armed)
    order: ObserveOrder = field(default_factory=ObserveOrder)
    accept: int | None = None  # the Accept of the Observe request, asked again for later Block2 blocks


@dataclass(slots=True)
class Device:
    registration: Registration
    observations: dict[bytes, Observation] = field(default_factory=dict)  # token → observation

    def token_for(self, path: str) -> bytes | None:
        for token, observation in self.observations.items():
            if observation.path == path:
                return token
        return None

    def record_of(self, token: bytes) -> ObservationRecord:
        o = self.observations[token]
        order = o.order
        return observation_record(self.registration.device_id, token, o.path, o.auto, order.last_seq, order.last_at)


class MissedTokens:
    """Tokens taken as unknown until a time: looked up and not found, or of an observation an Update ended."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._until: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._until)

    def miss(self, token: bytes) -> None:
        self._until.pop(token, None)
        self._until[token] = self._clock.now() + MISSED_TOKEN_TTL
        while len(self._until) > MAX_MISSED_TOKENS:
            self._until.popitem(last=False)

    def forget(self, token: bytes) -> None:
        """The token is known now (an observation of it was made or adopted)."""
        self._until.pop(token, None)

    def missed(self, token: bytes) -> bool:
        """Still taken as unknown? A miss past its time is forgotten."""
        until = self._until.get(token)
        if until is None:
            return False
        if until > self._clock.now():
            return True
        del self._until[token]
        return False


class Registry:
    """The held registrations (a cache of the stored ones when there is a store), the address each device's
    datagrams come from, the gateways among them, their expiry times, and the lanes to disarm when any changes."""

    def __init__(
        self, events: DeviceEvents, clock: Clock, store: RegistrationPersistence | None, expiry_grace: float
    ) -> None:
        self._events = events
        self.store = store
        self.expiry_grace = expiry_grace
        self.usage = UsageMeter(clock)  # issue 32 #3: the accounts' registrations by the hour (GET /v3/metrics)
        self.devices: dict[str, Device] = {}
        self.by_address: dict[Address, str] = {}
        # (account, endpoint name) → device id of registrations a (D)TLS identity made for itself, not behind another
        # gateway: who may register children with `gw=` (issue 13 #7)
        self.gateways: dict[tuple[str, str], str] = {}
        self.locks = KeyedLocks()
        self.deadlines = ExpiryHeap()  # every registration held here, by expiry time (issue 16 #3)
        self.missed = MissedTokens(clock)
        # the lanes of the plain and DTLS listeners (the observations armed for the Rust receive path, issue 15 #2):
        # every change of an address mapping, a registration or an observation disarms what it touches in each (the
        # DTLS listener disarms a peer whose session ends)
        self.lanes: list[ObserveLane] = []

    def device_at(self, address: Address) -> Device | None:
        device_id = self.by_address.get(address)
        return None if device_id is None else self.devices.get(device_id)

    def expires_at(self, updated_at: float, lifetime: int) -> float:
        """When a registration made or updated at `updated_at` expires unless updated again (lifetime + grace)."""
        return updated_at + lifetime + self.expiry_grace

    def hold(self, device: Device) -> None:
        """Hold `device` as its id's registration (replacing any) and track its expiry."""
        self.devices[device.registration.device_id] = device
        self.track(device)

    def track(self, device: Device) -> None:
        registration = device.registration
        self.deadlines.push(registration.device_id, registration.expires_at, registration.updated_at)

    def version(self, device_id: str) -> float | None:
        device = self.devices.get(device_id)
        return None if device is None else device.registration.updated_at

    async def restore(self) -> None:
        """Take up the stored registrations (after the core has started): requests reach those devices at once."""
        if self.store is not None:
            for record in await self.store.list_registrations():
                if record.device_id not in self.devices:
                    await self.adopt(record)

    async def adopt(self, record: Registration) -> Device:
        """Take up a registration another node (or this node before a restart) wrote, with its observations."""
        device = Device(registration_of(record))
        if self.store is not None:
            for observation in await self.store.device_observations(record.device_id):
                self.missed.forget(observation.token)
                device.observations[observation.token] = Observation(
                    path=observation.path,
                    auto=observation.auto,
                    order=ObserveOrder(observation.last_seq, observation.last_at),
                )
        self.hold(device)
        self.note_gateway(device.registration)
        # the stored address is where the device was last, not proof it is there: behind a balancer a dead node's
        # freed port may carry another held device's datagrams now (issue 31 #4), whose mapping stays; a datagram of
        # this device from that address maps it (observations.py)
        address = device.registration.address
        if self.by_address.get(address) in (None, record.device_id) or self.by_address[address] not in self.devices:
            self.map_address(address, record.device_id)
        await self._events.resumed(device.registration)
        return device

    async def known(self, device_id: str) -> Device | None:
        """The held registration, or the stored one taken up (a restart, another node)."""
        device = self.devices.get(device_id)
        if device is not None or self.store is None:
            return device
        record = await self.store.get_registration(device_id)
        return None if record is None else await self.adopt(record)

    def forget(self, device: Device) -> None:
        """Drop the device from memory, unless a newer registration of it replaced this one meanwhile."""
        device_id = device.registration.device_id
        if self.devices.get(device_id) is device:
            del self.devices[device_id]
            self.disarm(device_id)
            self.release(device.registration.address, device_id)
            registration = device.registration
            if self.gateways.get((registration.account_id, registration.endpoint_name)) == device_id:
                del self.gateways[(registration.account_id, registration.endpoint_name)]

    def note_gateway(self, registration: Registration) -> None:
        key = (registration.account_id, registration.endpoint_name)
        if registration.secure and registration.gateway in ("", registration.endpoint_name):
            self.gateways[key] = registration.device_id
        elif self.gateways.get(key) == registration.device_id:
            del self.gateways[key]

    def release(self, address: Address, device_id: str) -> None:
        """Unmap `address` if it is still `device_id`'s: a NAT may have given it to another device since."""
        if self.by_address.get(address) == device_id:
            del self.by_address[address]
            for lane in self.lanes:
                lane.disarm_remote(address)

    def map_address(self, address: Address, device_id: str) -> None:
        """Datagrams from `address` are `device_id`'s from now on; the lanes forget what they had armed for either."""
        self.by_address[address] = device_id
        for lane in self.lanes:
            lane.disarm_remote(address)
            lane.disarm_device(device_id)

    def disarm(self, device_id: str) -> None:
        for lane in self.lanes:
            lane.disarm_device(device_id)

    def end_observation(self, device: Device, token: bytes) -> None:
        del device.observations[token]
        self.disarm(device.registration.device_id)
