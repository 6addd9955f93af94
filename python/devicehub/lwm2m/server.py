"""The LwM2M server: registration interface, device requests and observations over one CoAP endpoint.

It turns CoAP traffic into `DeviceEvents` calls on the core and offers the core the `DeviceGateway` operations.
Registrations and observations are state of the service (issue 12 #5): each is written to the store and kept in
memory as a cache, so a restarted node — or, in Redis mode, another node the device's datagrams now reach —
accepts the device's next Update and understands its notifications by token without a re-register. Expiry runs
from the stored `expires_at`; of several nodes, the one whose conditional removal wins announces it.
Facts it follows: lwm2m-device-side.md §10.
Beside the plain endpoint a DTLS listener (lwm2m/dtls.py) and a TLS-over-TCP one (lwm2m/tls_stream.py) may feed
endpoints of their own (issue 13): there the peer's authenticated identity decides the device. A PSK identity or
certificate CN must be the endpoint name it registers; a registration made over (D)TLS is continued (Update,
De-register, Send, notifications) only by that identity, never over plain CoAP; plain CoAP is refused altogether
unless `allow_nosec`. One exception, for Edge gateways (issue 13 #7): a peer authenticated as G may register a
child endpoint with `gw=G` into G's account, and G then continues it, unless the child has a PSK of its own or
holds a (D)TLS registration not made through G (the gateway vouches for the devices behind it, as Pelion's Edge
did with its own credentials).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from devicehub._core import CoapMessage, ObserveLane, coap_encode_uint
from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceError, DeviceResponse, NotConnected, NotRegistered
from devicehub.domain.model import ObservationRecord, RegistrationLink, RegistrationRecord
from devicehub.domain.ports import DeviceEvents
from devicehub.domain.registration import TCP, UDP, Registration, ResourceLink
from devicehub.domain.storage.store import Store
from devicehub.errors import Unavailable
from devicehub.interning import InternTable
from devicehub.locks import KeyedLocks
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Handler, LaneNotification, NotificationHandler, Reply
from devicehub.lwm2m.coap.parameters import DEFAULT_LIMITS, EXCHANGE_LIFETIME, MAX_DATAGRAM, Limits
from devicehub.lwm2m.content import ContentError, decode_values, encode_text_value, split_values
from devicehub.lwm2m.dtls import DtlsListener
from devicehub.lwm2m.expiry import ExpiryHeap
from devicehub.lwm2m.links import LinkFormatError, parse_links, shared_link
from devicehub.lwm2m.query import MAX_ENDPOINT_NAME, endpoint_name_in, parse_query
from devicehub.lwm2m.retry_calendar import RetryCalendar
from devicehub.lwm2m.security import PeerIdentity
from devicehub.lwm2m.tcp import StreamListener
from devicehub.lwm2m.tls_stream import TlsAcceptor
from devicehub.lwm2m.udp import RECV_BATCHES, open_udp

log = logging.getLogger("devicehub.lwm2m")

DEFAULT_LIFETIME = 86_400  # LwM2M default `lt`
MAX_LIFETIME = 72 * 3600  # Pelion caps the lifetime at 72 h (lwm2m-device-side.md §2)
MIN_LIFETIME = 1
SUPPORTED_VERSIONS = ("1.0", "1.1")
MAX_WARNED = 10_000  # distinct refusals remembered so each is logged once
OBSERVE_FRESHNESS = 128.0  # RFC 7641 §3.4: after this long any sequence number is taken as newer
EXPIRY_CHECK_INTERVAL = 1.0
# issue 16 #2: registrations admitted but not yet stored beyond which a Register is shed with 5.03 and a Max-Age
# (RFC 7252 §5.9.3.4: the server says when to retry) booked in the node's retry calendar (retry_calendar.py)
MAX_REGISTRATION_BACKLOG = 2000
WRITE_RETRY_S = 1.0  # a batch the store could not write is tried again after this long
# a batch smaller than this waits up to BATCH_WINDOW_S (loop time) for more registrations before it is written: the
# devices have their answers already, and each batch costs store round trips and a commit whatever its size (issue 16
# #1). It goes at once when the backlog reaches its bound or someone waits for it (`settled`, `flush`). 50 ms, not
# 20: first registrations at 500/s cost 0.473 ms of CPU each with 20 ms windows and 0.414 with 50 (the writer thread
# 0.145 -> 0.122 ms, the loop 0.328 -> 0.292; `bench/register_bench.py --measure-cpu`); 100 ms gave 0.376 but holds
# a new device's events (and calls on it) a tenth of a second.
BATCH_FULL = 128
BATCH_WINDOW_S = 0.05
# a notification whose token this node does not hold is looked up in the store (another node's or a restarted
# node's observation): a token is looked up once at a time, at most this many at once (beyond: taken as unknown),
# and a miss is remembered this long (this many at most), so a flood of made-up tokens is not a flood of store reads
MAX_TOKEN_LOOKUPS = 64
MAX_TOKEN_WAITERS = 4 * MAX_TOKEN_LOOKUPS  # notifications waiting for a lookup, those sharing one included
MISSED_TOKEN_TTL = 5.0
MAX_MISSED_TOKENS = 10_000


@dataclass(slots=True)
class _Observation:
    path: str
    auto: bool  # adopted from the device's `aobs` (Pelion auto-observation), not requested by us
    last_seq: int | None = None  # None until the first notification (or the Observe response) of this stream
    last_at: float = 0.0
    accept: int | None = None  # the Accept of the Observe request, asked again for later Block2 blocks


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
class _Pending:
    """A registration to store with the next batch."""

    device: _Device
    fresh: bool  # a Register: announced to the core first, and the device's stored observations end
    registers: int = 0  # Registers coalesced here, each counted in the backlog until written
    announced: bool = False
    failed: bool = False


@dataclass(slots=True)
class ServerStats:
    registrations: int = 0
    updates: int = 0
    deregistrations: int = 0
    expirations: int = 0
    refused: int = 0
    notifications: int = 0
    stale_notifications: int = 0
    refused_identity: int = 0  # issue 13 #2: wrong identity, or plain CoAP where DTLS is required
    registrations_shed: int = 0  # Registers answered 5.03 + Max-Age because the backlog was full (issue 14 #5)
    registration_batches: int = 0  # batches of registrations written to the store (issue 16 #1)
    token_lookups: int = 0  # store lookups of a notification's unknown token
    token_lookups_shed: int = 0  # unknown tokens not looked up: too many lookups under way
    tokens_missed_cached: int = 0  # unknown tokens answered from the remembered misses


class LwM2MServer:
    """Implements domain.ports.DeviceGateway on top of a CoapEndpoint."""

    def __init__(
        self,
        events: DeviceEvents,
        clock: Clock,
        *,
        expiry_grace: float = 93.0,
        store: Store | None = None,
        allow_nosec: bool = True,
        limits: Limits = DEFAULT_LIMITS,
        max_backlog: int = MAX_REGISTRATION_BACKLOG,
    ) -> None:
        self._events = events
        self._limits = limits
        self._max_backlog = max_backlog
        self._backlog = 0  # registrations admitted and not yet stored and answered
        # when shed Registers are told to come back: never more in a second than the backlog holds
        self._retries = RetryCalendar(most_per_second=max_backlog)
        self._pending: dict[str, _Pending] = {}  # device id → its write in the next batch
        self._writing: dict[str, _Pending] = {}  # the batch being written
        self._writer: asyncio.Future[None] | None = None
        self._batch_done: asyncio.Future[None] | None = None
        self._window: asyncio.Future[None] | None = None  # the next batch gathering company (BATCH_WINDOW_S)
        self._urgent = False  # someone waits for a pending registration: its batch opens no window
        self._closing = False
        self._store = store
        self._clock = clock
        self._expiry_grace = expiry_grace
        self._endpoint: CoapEndpoint | None = None
        self._devices: dict[str, _Device] = {}
        self._by_address: dict[Address, str] = {}
        # (account, endpoint name) → device id of registrations a (D)TLS identity made for itself, not behind another
        # gateway: who may register children with `gw=` (issue 13 #7)
        self._gateways: dict[tuple[str, str], str] = {}
        self._locks = KeyedLocks()
        self._expiry: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        self._expiry_ticks = 0
        self._completions: set[asyncio.Task[None]] = set()  # Block2 notifications being fetched
        self._allow_nosec = allow_nosec
        self._secure: CoapEndpoint | None = None
        self._dtls: DtlsListener | None = None
        self._streams: list[StreamListener] = []  # CoAP over TCP and over TLS (RFC 8323, issue 13 #5)
        self._coaps_tcp: StreamListener | None = None
        self._endpoints: list[tuple[str, CoapEndpoint]] = []  # every endpoint, with its transport (`_new_endpoint`)
        self._warned: dict[tuple[str, ...], None] = {}
        self._deadlines = ExpiryHeap()  # every registration held here, by expiry time (issue 16 #3)
        self._lookups: dict[bytes, asyncio.Future[ObservationRecord | None]] = {}  # unknown tokens being looked up
        self._lookup_waiters = 0
        self._missed: OrderedDict[bytes, float] = OrderedDict()  # token → until when it is taken as unknown
        # the lanes of the plain and DTLS listeners (the observations armed for the Rust receive path, issue 15 #2):
        # every change of an address mapping, a registration or an observation below disarms what it touches in
        # each (the DTLS listener disarms a peer whose session ends)
        self._lanes: list[ObserveLane] = []
        self.stats = ServerStats()

    # ---- lifecycle --------------------------------------------------------------------------------
    def _new_endpoint(self, transport: str, on_request: Handler, on_notification: NotificationHandler) -> CoapEndpoint:
        """Every endpoint of this server has its limits, is swept by the periodic timer and is in `metrics()` under
        its transport's prefix (`coap`, `coaps`, `coap_tcp`, `coaps_tcp`)."""
        endpoint = CoapEndpoint(self._clock, on_request, on_notification, limits=self._limits)
        self._endpoints.append((transport, endpoint))
        return endpoint

    async def start(self, host: str, port: int) -> None:
        endpoint = self._new_endpoint("coap", self._handle, self._notification)  # UDP is their default transport
        if RECV_BATCHES and self._allow_nosec:  # the lane runs in the batch reader; plain CoAP only where allowed
            self._add_lane(endpoint)
        await open_udp(endpoint, host, port)  # recvmmsg batches on Linux (issue 15 #2)
        self._endpoint = endpoint
        self._expiry = asyncio.create_task(self._expire_forever(), name="lwm2m-expiry")

    async def start_secure(self, host: str, port: int, certificate: tuple[bytes, bytes], **options: Any) -> None:
        """The CoAPs listener (issue 13 #1); its decrypted datagrams reach the same handlers, with an identity."""
        endpoint = self._new_endpoint("coaps", *self._identified(self._dtls_identity, UDP))
        self._add_lane(endpoint)  # offered each session's decrypted records
        self._dtls = await DtlsListener.bind(host, port, self._clock, endpoint, certificate=certificate, **options)
        self._secure = endpoint

    def _add_lane(self, endpoint: CoapEndpoint) -> None:
        lane = ObserveLane(self._limits.dedup_entries, EXCHANGE_LIFETIME, MAX_DATAGRAM, OBSERVE_FRESHNESS)
        endpoint.attach_lane(lane, self._lane_values)
        self._lanes.append(lane)

    async def start_tcp(self, host: str, port: int) -> StreamListener:
        """A CoAP-over-TCP listener (issue 13 #5): its frames reach the same handlers; plain TCP is plain CoAP."""
        endpoint = self._new_endpoint(
            "coap_tcp", partial(self._handle, identity=None, transport=TCP), partial(self._notification, transport=TCP)
        )
        listener = StreamListener(endpoint)
        await listener.start(host, port)
        self._streams.append(listener)
        return listener

    async def start_secure_tcp(
        self, host: str, port: int, certificate: tuple[bytes, bytes], **options: Any
    ) -> StreamListener:
        """The CoAP-over-TLS listener (`coaps+tcp://`, issue 13 #5): its frames reach the same handlers, with the
        identity the TLS handshake proved, under the DTLS listener's rules."""
        endpoint = self._new_endpoint("coaps_tcp", *self._identified(self._tls_identity, TCP))
        listener = StreamListener(endpoint, tls=TlsAcceptor(self._clock, certificate, **options))
        await listener.start(host, port)
        self._coaps_tcp = listener
        self._streams.append(listener)
        return listener

    @property
    def dtls(self) -> DtlsListener | None:
        return self._dtls

    @property
    def coaps_tcp(self) -> TlsAcceptor | None:
        """The TLS side of the `coaps+tcp://` listener: its keyring, bounds and figures."""
        return None if self._coaps_tcp is None else self._coaps_tcp.tls

    @property
    def allow_nosec(self) -> bool:
        return self._allow_nosec

    async def restore(self) -> None:
        """Take up the stored registrations (after the core has started): requests reach those devices at once.
        Without it they would still be taken up lazily, at the device's next Update or notification."""
        if self._store is not None:
            for record in await self._store.list_registrations():
                if record.device_id not in self._devices:
                    await self._adopt(record)

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        for task in list(self._completions):
            task.cancel()
        await asyncio.gather(*self._completions, return_exceptions=True)
        if self._endpoint is not None:
            await self._endpoint.close()
        if self._dtls is not None:
            await self._dtls.close()
        for stream in self._streams:
            await stream.close()
        self._closing = True
        await self.flush()  # a graceful stop stores every registration it answered
        if self._store is not None:  # the freshness of each observation, for whoever serves the device next
            for device in self._devices.values():
                for token, observation in device.observations.items():
                    await self._store.put_observation(_observation_record(device, token, observation))

    # ---- the stored registration table ----------------------------------------------------------------
    async def _adopt(self, record: RegistrationRecord) -> _Device:
        """Take up a registration another node (or this node before a restart) wrote, with its observations."""
        device = _Device(_registration(record))
        if self._store is not None:
            for observation in await self._store.device_observations(record.device_id):
                self._missed.pop(observation.token, None)
                device.observations[observation.token] = _Observation(
                    path=observation.path,
                    auto=observation.auto,
                    last_seq=observation.last_seq,
                    last_at=observation.last_at,
                )
        self._devices[record.device_id] = device
        self._track(device)
        self._note_gateway(device.registration)
        self._map_address(device.registration.address, record.device_id)
        await self._events.resumed(device.registration)
        return device

    async def _known(self, device_id: str) -> _Device | None:
        device = self._devices.get(device_id)
        if device is not None or self._store is None:
            return device
        record = await self._store.get_registration(device_id)
        return None if record is None else await self._adopt(record)

    # ---- batched persistence (issue 16 #1) -------------------------------------------------------------
    def _enqueue(self, device: _Device, *, fresh: bool) -> None:
        """Store the device's registration with the next batch; a Register is also announced to the core then."""
        device_id = device.registration.device_id
        entry = self._pending.get(device_id)
        if entry is None:
            entry = self._pending[device_id] = _Pending(device, fresh)
        else:  # several writes of one device in one batch: the last state is written, once
            entry.device, entry.fresh = device, entry.fresh or fresh
            entry.announced = entry.announced and not fresh
        entry.registers += fresh
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_pending())
        elif len(self._pending) >= BATCH_FULL or self._backlog >= self._max_backlog:
            self._write_now()

    def _write_now(self, *, urgent: bool = False) -> None:
        """End the batch window: the pending registrations are written without waiting for more (`urgent`: the
        next batch too, when one is being written now)."""
        self._urgent = self._urgent or urgent
        if self._window is not None and not self._window.done():
            self._window.set_result(None)

    async def _write_pending(self) -> None:
        """Group commit: what arrived while a batch was being written (or within BATCH_WINDOW_S) is the next batch."""
        loop = asyncio.get_running_loop()
        while self._pending:
            gather = len(self._pending) < BATCH_FULL and self._backlog < self._max_backlog
            if gather and not (self._closing or self._urgent):
                self._window = window = loop.create_future()
                timer = loop.call_later(BATCH_WINDOW_S, self._write_now)
                try:
                    await window
                finally:
                    timer.cancel()
                    self._window = None
            batch, self._pending, self._urgent = self._pending, {}, False
            self._writing = batch
            self.stats.registration_batches += 1
            try:
                await self._persist(list(batch.values()))
            except Exception as error:
                if not isinstance(error, Unavailable):
                    log.exception("storing %d registration(s) failed; retrying", len(batch))
                for device_id, entry in batch.items():  # a newer write of the device supersedes this one
                    newer = self._pending.get(device_id)
                    if newer is None:
                        self._pending[device_id] = entry
                    else:
                        newer.fresh, newer.registers = newer.fresh or entry.fresh, newer.registers + entry.registers
                if self._closing:
                    self._backlog -= sum(e.registers for e in self._pending.values())
                    self._pending = {}
                    log.error("registrations not stored at stop: their devices register again")
                else:
                    self._writing = {}
                    await self._clock.sleep(WRITE_RETRY_S)
                    continue
            else:
                self._backlog -= sum(entry.registers for entry in batch.values())
            finally:
                self._writing = {}
                done, self._batch_done = self._batch_done, None
                if done is not None:
                    done.set_result(None)

    async def _persist(self, entries: list[_Pending]) -> None:
        fresh = [e for e in entries if e.fresh and not e.announced]
        if fresh:
            try:
                await self._events.registered_many([e.device.registration for e in fresh])
                results: list[BaseException | None] = [None] * len(fresh)
            except Unavailable:
                raise  # the store cannot write: the batch is tried again
            except Exception:  # find the registration at fault: one by one
                log.exception("storing a batch of %d registration(s) failed; one by one now", len(fresh))
                results = await asyncio.gather(
                    *(self._events.registered(e.device.registration) for e in fresh), return_exceptions=True
                )
            for entry, result in zip(fresh, results, strict=True):
                if isinstance(result, BaseException):
                    if not isinstance(result, Exception):
                        raise result
                    # issue 14 #1: a failed registration leaves no trace; the device's next Update gets 4.04
                    log.error("registration of %s failed", entry.device.registration.device_id, exc_info=result)
                    self._forget(entry.device)
                    entry.failed = True
                entry.announced = True
        if self._store is None:
            return
        records: list[RegistrationRecord] = []
        observations: list[ObservationRecord] = []
        for entry in entries:
            if entry.failed or self._devices.get(entry.device.registration.device_id) is not entry.device:
                continue  # failed, or deregistered, dropped or expired meanwhile
            registration = entry.device.registration
            records.append(_record(registration, registration.updated_at + registration.lifetime + self._expiry_grace))
            for token, observation in entry.device.observations.items():
                if entry.fresh or observation.last_seq is None:
                    observations.append(_observation_record(entry.device, token, observation))
        await self._store.put_registrations(
            records, observations, [e.device.registration.device_id for e in entries if e.fresh and not e.failed]
        )

    def _deliver(self, device_id: str, path: str, content_format: int | None, payload: bytes, seq: int | None) -> None:
        """Hand a value to the core; one of a device whose Register the core has not heard yet waits for it."""
        entry = self._pending.get(device_id) or self._writing.get(device_id)
        if entry is None or not entry.fresh or entry.announced:
            self._events.notification(device_id, path, content_format, payload, seq)
            return

        async def later() -> None:
            await self.settled(device_id)
            self._events.notification(device_id, path, content_format, payload, seq)

        task = asyncio.ensure_future(later())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forget(self, device: _Device) -> None:
        """Drop the device from memory, unless a newer registration of it replaced this one meanwhile."""
        device_id = device.registration.device_id
        if self._devices.get(device_id) is device:
            del self._devices[device_id]
            self._disarm(device_id)
            self._release(device.registration.address, device_id)
            registration = device.registration
            if self._gateways.get((registration.account_id, registration.endpoint_name)) == device_id:
                del self._gateways[(registration.account_id, registration.endpoint_name)]

    def _note_gateway(self, registration: Registration) -> None:
        key = (registration.account_id, registration.endpoint_name)
        if registration.secure and registration.gateway in ("", registration.endpoint_name):
            self._gateways[key] = registration.device_id
        elif self._gateways.get(key) == registration.device_id:
            del self._gateways[key]

    def _release(self, address: Address, device_id: str) -> None:
        """Unmap `address` if it is still `device_id`'s: a NAT may have given it to another device since."""
        if self._by_address.get(address) == device_id:
            del self._by_address[address]
            for lane in self._lanes:
                lane.disarm_remote(address)

    def _map_address(self, address: Address, device_id: str) -> None:
        """Datagrams from `address` are `device_id`'s from now on; the lanes forget what they had armed for either."""
        self._by_address[address] = device_id
        for lane in self._lanes:
            lane.disarm_remote(address)
            lane.disarm_device(device_id)

    def _disarm(self, device_id: str) -> None:
        for lane in self._lanes:
            lane.disarm_device(device_id)

    def _end_observation(self, device: _Device, token: bytes) -> None:
        del device.observations[token]
        self._disarm(device.registration.device_id)

    async def settled(self, device_id: str | None = None) -> None:
        """Return once no write of the device (None: of any device pending now) is left; a deregistration must
        not be overtaken by it, and an application reads what was answered before its call."""
        waiting = {device_id} if device_id is not None else set(self._pending) | set(self._writing)
        if any(d in self._pending for d in waiting):
            self._write_now(urgent=True)
        while any(d in self._pending or d in self._writing for d in waiting):
            if self._batch_done is None:
                self._batch_done = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._batch_done)

    async def flush(self) -> None:
        """Return once every registration answered so far is stored (and announced to the core)."""
        self._write_now(urgent=True)
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    @property
    def address(self) -> Address:
        assert self._endpoint is not None, "start() first"
        return self._endpoint.address

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {
            "lwm2m_registered_devices": len(self._devices),
            "lwm2m_registration_backlog": self._backlog,
            "lwm2m_token_lookups_running": len(self._lookups),
            "lwm2m_missed_tokens": len(self._missed),
        }
        for name, value in vars_of(self.stats).items():
            values[f"lwm2m_{name}"] = value
        for transport, endpoint in self._endpoints:  # of several TCP listeners, the figures are summed
            for name, value in [*vars_of(endpoint.stats).items(), *endpoint.table_sizes().items()]:
                key = f"{transport}_{name}"
                values[key] = values.get(key, 0) + value
        values["lwm2m_locks"] = len(self._locks)
        for transport, endpoint in self._endpoints:
            if transport in ("coap", "coaps"):  # the UDP listeners: what their sockets' buffers could not take
                values[f"{transport}_receive_drops"] = endpoint.receive_drops()
        if self._dtls is not None:
            values["dtls_sessions"] = self._dtls.session_count()
            for name, value in vars_of(self._dtls.stats).items():
                values[f"dtls_{name}"] = value
        if (tls := self.coaps_tcp) is not None:
            values["coaps_tcp_connections"] = tls.connection_count()
            for name, value in vars_of(tls.stats).items():
                values[f"coaps_tcp_{name}"] = value
        return values

    # ---- DeviceGateway ---------------------------------------------------------------------------------
    def registration(self, device_id: str) -> Registration | None:
        device = self._devices.get(device_id)
        return None if device is None else device.registration

    def connected(self, registration: Registration) -> bool:
        return registration.transport != TCP or self._live_stream(registration) is not None

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
        response = await self._endpoint_for(device).request(
            device.registration.address, codes.METHODS[method], options, payload
        )
        return _response(response)

    async def observe(self, device_id: str, path: str, accept: int | None = None) -> DeviceResponse:
        device = self._require(device_id)
        endpoint = self._endpoint_for(device)
        # RFC 7641 §4.1: observing again with the same token re-registers instead of adding a second stream
        token = device.token_for(path)
        if token is None:
            token = endpoint.new_token()
            self._missed.pop(token, None)
            device.observations[token] = _Observation(path=path, auto=False, accept=accept)
        else:
            # a re-registration starts a new stream: Anjay answers it with Observe 0 and counts up again
            # (avs_coap: "Response to the original Observe request always set the option to 0"), so the
            # old stream's last number and time must not judge the new one stale (RFC 7641 §3.4, §4.4)
            renewed = device.observations[token]
            renewed.last_seq, renewed.last_at, renewed.accept = None, self._clock.now(), accept
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
        if (observation := device.observations.get(token)) is not None:
            # the response opens the stream: its number is the baseline even if a datagram of the old stream
            # slipped in meanwhile; its value is reported only if no notification overtook it (that one is newer)
            overtaken = observation.last_seq is not None
            observation.last_seq, observation.last_at = response.observe, self._clock.now()
            # delivered before any await: a notification handled during one would reach channels before this
            # older value
            if response.payload and not overtaken:
                self.stats.notifications += 1
                self._deliver(device_id, path, response.content_format, response.payload, response.observe)
            if self._store is not None:
                try:
                    await self._store.put_observation(_observation_record(device, token, observation))
                except Unavailable:
                    # the store reports its outage itself; the stream works in this process, only a restart
                    # meanwhile would not know its token (the device is observed again when it registers)
                    log.info("observation %s%s not stored (store unavailable)", device_id, path)
        return _response(response)

    def split_values(
        self, path: str, content_format: int | None, payload: bytes, content_type: str
    ) -> list[tuple[str, bytes, str]]:
        return split_values(path, content_format, payload, content_type)

    def observed(self, device_id: str, path: str) -> bool:
        """Whether `path` has an observation this server requested (pending or established)."""
        device = self._devices.get(device_id)
        if device is None:
            return False
        token = device.token_for(path)
        return token is not None and not device.observations[token].auto

    def observing(self, device_id: str, path: str) -> bool:
        """Whether `path` has an established observation this server requested: its Observe was answered with
        success (which sets the stream's number) and nothing removed it since; a re-Observe under way clears
        the number until its answer comes."""
        device = self._devices.get(device_id)
        if device is None:
            return False
        token = device.token_for(path)
        if token is None:
            return False
        observation = device.observations[token]
        return not observation.auto and observation.last_seq is not None

    async def cancel_observe(self, device_id: str, path: str) -> None:
        """Proactive cancel: GET with Observe=1 and the same token (RFC 7641 §3.6); auto-observations stay."""
        device = self._devices.get(device_id)
        if device is None:
            return
        token = device.token_for(path)
        if token is None or device.observations[token].auto:
            return
        self._end_observation(device, token)
        if self._store is not None:
            await self._store.remove_observation(token)
        options = [(codes.OBSERVE, coap_encode_uint(1)), *codes.path_options(path)]
        try:
            await self._endpoint_for(device).request(device.registration.address, codes.GET, options, token=token)
        except DeviceError as error:
            log.debug("cancel of %s%s not answered: %s", device_id, path, error)

    async def drop(self, device_id: str) -> bool:
        """The device was removed from the directory (`DELETE /v3/devices/{id}`): forget its registration."""
        async with self._locks(device_id):
            await self.settled(device_id)
            device = await self._known(device_id)  # one kept in the store (restart, another node) counts too
            if device is None:
                return False
            self._forget(device)
            if self._store is not None:  # so that no node accepts its next Update
                await self._store.remove_registration(device_id)
            return True

    # ---- incoming requests ------------------------------------------------------------------------------
    def _dtls_identity(self, remote: Address) -> PeerIdentity | None:
        return None if self._dtls is None else self._dtls.identity(remote)

    def _tls_identity(self, remote: Address) -> PeerIdentity | None:
        return None if self._coaps_tcp is None else self._coaps_tcp.identity(remote)

    def _identified(
        self, identity_of: Callable[[Address], PeerIdentity | None], transport: str
    ) -> tuple[Handler, NotificationHandler]:
        """The handlers of a (D)TLS endpoint: each message carries the identity its peer's session proved and the
        transport it came over."""

        async def handle(message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
            identity = identity_of(remote)
            if identity is None:  # its session ended meanwhile
                return Reply(codes.UNAUTHORIZED)
            return await self._handle(message, payload, remote, identity, transport)

        def notification(message: CoapMessage, remote: Address) -> bool | Awaitable[bool]:
            identity = identity_of(remote)
            return False if identity is None else self._notification(message, remote, identity, transport)

        return handle, notification

    async def _handle(
        self,
        message: CoapMessage,
        payload: bytes,
        remote: Address,
        identity: PeerIdentity | None = None,
        transport: str = UDP,
    ) -> Reply | None:
        if identity is None and not self._allow_nosec:
            self.stats.refused_identity += 1
            self._warn_once(
                ("nosec", remote[0]),
                "plain CoAP from %s refused: this service requires DTLS or TLS (--allow-nosec accepts plain CoAP)",
                remote[0],
            )
            return Reply(codes.FORBIDDEN, payload=b"DTLS required")
        segments = [s for s in message.uri_path.split("/") if s]
        if segments[:1] == ["rd"]:
            if message.code == codes.POST and len(segments) == 1:
                return await self._register(message, payload, remote, identity, transport)
            if len(segments) >= 2 and message.code in (codes.POST, codes.DELETE):
                async with self._locks(segments[-1]):
                    if message.code == codes.POST:
                        return await self._update(segments[-1], message, payload, remote, identity, transport)
                    return await self._deregister(segments[-1], remote, identity)
            return Reply(codes.METHOD_NOT_ALLOWED)
        if segments == ["dp"] and message.code == codes.POST:
            return self._send_operation(message, payload, remote, identity)
        return Reply(codes.NOT_FOUND)

    def _warn_once(self, key: tuple[str, ...], text: str, *args: object) -> None:
        if key in self._warned:
            return
        if len(self._warned) >= MAX_WARNED:
            del self._warned[next(iter(self._warned))]
        self._warned[key] = None
        log.warning(text, *args)

    def _continues(self, device: _Device, identity: PeerIdentity | None, remote: Address, what: str) -> bool:
        """May this peer act on `device`'s registration? Logs the refusal once (issue 13 #2)."""
        registration = device.registration
        if identity is None:
            allowed = not registration.secure
        else:
            allowed = (
                registration.secure
                and identity.name in (registration.endpoint_name, registration.gateway or registration.endpoint_name)
                and identity.account_id == registration.account_id
            )
        if not allowed:
            self.stats.refused_identity += 1
            who = "plain CoAP" if identity is None else f"(D)TLS identity {identity.name!r}"
            self._warn_once(
                (what, registration.device_id, who),
                "%s for %s refused: %s from %s:%d may not continue a registration made %s",
                what,
                registration.endpoint_name,
                who,
                remote[0],
                remote[1],
                "over (D)TLS by that device" if registration.secure else "over plain CoAP",
            )
        return allowed

    async def _register(
        self,
        message: CoapMessage,
        payload: bytes,
        remote: Address,
        identity: PeerIdentity | None = None,
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
        if self._backlog >= self._max_backlog:  # before the links are parsed: in a storm most Registers end here
            self.stats.registrations_shed += 1
            return self._shed()
        try:
            links = tuple(link for link in parse_links(payload) if not link.deleted)
        except LinkFormatError as error:
            return _bad(str(error))
        self._backlog += 1  # until the batch that stores it is written (`_write_pending`)
        self._retries.admitted(self._clock.now())
        reply = Reply(codes.INTERNAL_ERROR)
        try:
            reply = await self._admit(query, links, lifetime, remote, identity, transport)
        finally:
            if reply.code != codes.CREATED:
                self._backlog -= 1
        return reply

    def _shed(self) -> Reply:
        """issue 16 #2: refuse instead of queueing; the device retries after Max-Age (RFC 7252 §5.9.3.4)."""
        max_age = coap_encode_uint(self._retries.retry_after(self._clock.now()))
        return Reply(codes.SERVICE_UNAVAILABLE, [(codes.MAX_AGE, max_age)])

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
        if identity is not None and identity.name != endpoint_name:
            why = (
                "identity is not the endpoint name"
                if not child
                else "the device has a PSK of its own"
                if self._has_psk(endpoint_name)
                else ""
            )
            if not why and (identity.account_id, identity.name) not in self._gateways:
                why = "the gateway has no registration of its own"
            if why:
                return self._refuse_identity(identity.name, endpoint_name, why)
        if identity is None:
            admission = await self._events.admit(endpoint_name, endpoint_type)
        else:
            admission = await self._events.admit(endpoint_name, endpoint_type, identity.account_id)
        if admission is None:
            self.stats.refused += 1
            return Reply(codes.FORBIDDEN)
        if child and not admission.new:  # a gateway takes no registration its child made itself (or via another)
            assert identity is not None
            known = await self._known(admission.device_id)
            if known is not None and known.registration.secure and known.registration.gateway != identity.name:
                return self._refuse_identity(identity.name, endpoint_name, "the device registered itself over DTLS")
        if identity is None and not admission.new:  # a plain Register must not take over one made over DTLS
            known = await self._known(admission.device_id)
            if known is not None and not self._continues(known, None, remote, "register"):
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
            gateway=gateway,
            secure=identity is not None,
            transport=transport,
        )
        async with self._locks(admission.device_id):
            previous = self._devices.get(admission.device_id)
            if previous is not None:
                # a Register for a known endpoint is a restart: its observations are gone (spec §2.1)
                self._release(previous.registration.address, admission.device_id)
            device = _Device(registration)
            for link in links:
                if link.aobs is not None:
                    device.observations[link.aobs.to_bytes(2, "big")] = _Observation(path=link.path, auto=True)
            self._devices[admission.device_id] = device
            self._track(device)
            if not child:
                self._note_gateway(registration)
            self._map_address(remote, admission.device_id)
            # issue 16 #1: answered now; announced to the core and stored with the next batch
            self._enqueue(device, fresh=True)
            self.stats.registrations += 1
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

    def _has_psk(self, endpoint_name: str) -> bool:
        """Does a listener's keyring hold a PSK for this name (both listeners are given the same keyring)?"""
        listener = self._dtls or self.coaps_tcp
        return listener is not None and listener.has_psk(endpoint_name)

    def _refuse_identity(self, identity: str, endpoint_name: str, why: str) -> Reply:
        self.stats.refused += 1
        self.stats.refused_identity += 1
        self._warn_once(
            ("register", identity, endpoint_name),
            "register refused: (D)TLS identity %r may not register endpoint name %r: %s",
            identity,
            endpoint_name,
            why,
        )
        return Reply(codes.FORBIDDEN, payload=why.encode())

    async def _update(
        self,
        device_id: str,
        message: CoapMessage,
        payload: bytes,
        remote: Address,
        identity: PeerIdentity | None = None,
        transport: str = UDP,
    ) -> Reply:
        entry = self._pending.get(device_id) or self._writing.get(device_id)
        if entry is not None and entry.fresh:
            await self.settled(device_id)  # the core hears of the Register before the Update
        device = await self._known(device_id)
        if device is None:
            return Reply(codes.NOT_FOUND)  # the client registers afresh
        if not self._continues(device, identity, remote, "update"):
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
        links, added = _merge(current.links, delta)
        binding = query.get("b", current.binding)
        registration = replace(
            current,
            lifetime=lifetime,
            binding=binding,
            links=links,
            # the device is reached where its Update came from: over TCP that is the connection it came on
            # (RFC 8323 §3, LwM2M 1.1 Transport §6.4), so address and transport move together
            address=remote,
            transport=transport,
            updated_at=self._clock.now(),
            endpoint_type=query.get("et", current.endpoint_type),
            queue_mode="Q" in binding or "Q" in query if ("b" in query or "Q" in query) else current.queue_mode,
        )
        if current.address != remote:
            self._release(current.address, device_id)
        self._map_address(remote, device_id)
        device.registration = registration
        self._track(device)
        for link in added:
            if link.aobs is not None:
                device.observations[link.aobs.to_bytes(2, "big")] = _Observation(path=link.path, auto=True)
        for token, observation in list(device.observations.items()):
            if not _covered(observation.path, links):  # its object, instance or resource is gone
                self._end_observation(device, token)
                self._miss(token)  # a value it still sends is unknown here, not looked up and adopted again
                self._spawn_forget(token)
        self.stats.updates += 1
        self._enqueue(device, fresh=False)
        await self._events.updated(registration, added)
        return Reply(codes.CHANGED)

    async def _deregister(self, device_id: str, remote: Address, identity: PeerIdentity | None = None) -> Reply:
        await self.settled(device_id)
        known = await self._known(device_id)
        if known is not None and not self._continues(known, identity, remote, "de-register"):
            return Reply(codes.FORBIDDEN)
        device = self._devices.get(device_id)
        if device is None:
            return Reply(codes.NOT_FOUND)
        self._forget(device)
        if self._store is not None:
            await self._store.remove_registration(device_id)
        self.stats.deregistrations += 1
        log.info("de-registered %s (%s)", device.registration.endpoint_name, device_id)
        await self._events.deregistered(device.registration)
        return Reply(codes.DELETED)

    def _send_operation(
        self, message: CoapMessage, payload: bytes, remote: Address, identity: PeerIdentity | None = None
    ) -> Reply:
        """LwM2M 1.1 Send (`POST /dp`): each value is taken as a notification of its path."""
        device_id = self._by_address.get(remote)
        device = self._devices.get(device_id) if device_id is not None else None
        if device_id is None or device is None or not self._continues(device, identity, remote, "send"):
            return Reply(codes.FORBIDDEN)
        try:
            values = decode_values(message.content_format, payload, "/")
        except ContentError as error:
            return _bad(str(error))
        for path, value in values.items():
            self.stats.notifications += 1
            self._deliver(device_id, path, 0, encode_text_value(value), None)
        return Reply(codes.CHANGED)

    # ---- notifications --------------------------------------------------------------------------------
    def _notification(
        self, message: CoapMessage, remote: Address, identity: PeerIdentity | None = None, transport: str = UDP
    ) -> bool | Awaitable[bool]:
        if identity is None and not self._allow_nosec:
            return False
        device_id = self._by_address.get(remote)
        device = self._devices.get(device_id) if device_id is not None else None
        observation = device.observations.get(message.token) if device is not None else None
        if device is None or observation is None:
            if self._store is None:
                return False
            return self._look_up(message, remote, identity, transport)
        if not self._continues(device, identity, remote, "notification"):
            return False
        accepted = self._accept_notification(device, observation, message, remote)
        if transport == UDP:  # plain CoAP or DTLS: each listener's lane
            self._arm(identity, device, remote, message.token, observation)
        return accepted

    def _arm(
        self, identity: PeerIdentity | None, device: _Device, remote: Address, token: bytes, observation: _Observation
    ) -> None:
        """A notification of `observation` from `remote` was accepted over UDP, plain (no `identity`) or DTLS: its
        next ones from there may take that listener's lane, unless this one ended it. (The lane leaves to this path
        whatever it would not accept as this one was; over DTLS, the peer's session is the identity this one was
        accepted with.)"""
        endpoint = self._endpoint if identity is None else self._secure
        lane = None if endpoint is None else endpoint.observe_lane
        if lane is not None and device.observations.get(token) is observation:
            lane.arm(device.registration.device_id, remote, token, observation.path, observation)

    def _lane_values(self, values: list[LaneNotification], stale: int) -> None:
        """What the lane accepted of a batch: as `_accept_notification` goes on with each, in their order."""
        self.stats.notifications += len(values)
        self.stats.stale_notifications += stale
        if self._pending or self._writing:  # some registration is not announced yet: `_deliver` sorts them out
            for device_id, path, content_format, payload, seq in values:
                self._deliver(device_id, path, content_format, payload, seq)
            return
        self._events.notifications(values)

    def _look_up(
        self, message: CoapMessage, remote: Address, identity: PeerIdentity | None, transport: str
    ) -> bool | Awaitable[bool]:
        """A token this node does not hold: the device may have been served by another node or before a restart.
        Looked up in the store once at a time, boundedly; a miss is remembered for MISSED_TOKEN_TTL."""
        assert self._store is not None
        token = message.token
        until = self._missed.get(token)
        if until is not None:
            if until > self._clock.now():
                self.stats.tokens_missed_cached += 1
                return False
            del self._missed[token]
        lookup = self._lookups.get(token)
        if self._lookup_waiters >= MAX_TOKEN_WAITERS or (lookup is None and len(self._lookups) >= MAX_TOKEN_LOOKUPS):
            self.stats.token_lookups_shed += 1
            return False
        if lookup is None:
            self.stats.token_lookups += 1
            lookup = self._lookups[token] = asyncio.ensure_future(self._store.get_observation(token))
            lookup.add_done_callback(lambda done: self._looked_up(token, done))
        self._lookup_waiters += 1
        return self._stored_notification(message, remote, identity, transport, lookup)

    def _looked_up(self, token: bytes, lookup: asyncio.Future[ObservationRecord | None]) -> None:
        if self._lookups.get(token) is lookup:
            del self._lookups[token]
        if not lookup.cancelled() and lookup.exception() is None and lookup.result() is None:
            self._miss(token)

    def _miss(self, token: bytes) -> None:
        self._missed.pop(token, None)
        self._missed[token] = self._clock.now() + MISSED_TOKEN_TTL
        while len(self._missed) > MAX_MISSED_TOKENS:
            self._missed.popitem(last=False)

    async def _stored_notification(
        self,
        message: CoapMessage,
        remote: Address,
        identity: PeerIdentity | None,
        transport: str,
        lookup: asyncio.Future[ObservationRecord | None],
    ) -> bool:
        assert self._store is not None
        try:
            stored = await asyncio.shield(lookup)  # shared by the notifications of this token: none cancels it
        finally:
            self._lookup_waiters -= 1
        if stored is None:
            return False
        device = self._devices.get(stored.device_id)
        if device is None or message.token not in device.observations:  # the cached device lacks the token
            record = await self._store.get_registration(stored.device_id)
            device = self._devices.get(stored.device_id)  # another notification of it may have adopted it meanwhile
            if device is None or message.token not in device.observations:
                if record is None or (
                    # the store still has a registration older than the one held here (a Register not written
                    # yet): the token is one that Register ended. The same registration, or a newer one, is taken
                    # up as before: another node may have observed what this node does not know of.
                    device is not None and record.registered_at < device.registration.registered_at
                ):
                    self._miss(message.token)
                    return False
                device = await self._adopt(record)
        observation = device.observations.get(message.token)
        if observation is None or not self._continues(device, identity, remote, "notification"):
            return False
        if device.registration.address != remote:  # its source address moved (NAT, load balancer, a new connection)
            self._release(device.registration.address, stored.device_id)
            device.registration = replace(device.registration, address=remote, transport=transport)
            self._map_address(remote, stored.device_id)
        accepted = self._accept_notification(device, observation, message, remote)
        if transport == UDP:  # plain CoAP or DTLS: each listener's lane
            self._arm(identity, device, remote, message.token, observation)
        return accepted

    def _accept_notification(
        self, device: _Device, observation: _Observation, message: CoapMessage, remote: Address
    ) -> bool:
        if message.code >> 5 != 2:
            self._end_observation(device, message.token)  # an error response ends the observation (RFC 7641 §3.2)
            self._spawn_forget(message.token)
            return True
        now = self._clock.now()
        seq = message.observe
        if seq is not None and observation.last_seq is not None and not _newer(observation, seq, now):
            self.stats.stale_notifications += 1
            return True  # acknowledged, but older than what we have (RFC 7641 §3.4)
        if seq is not None:
            observation.last_seq, observation.last_at = seq, now
        block2 = message.block2
        if block2 is not None and (block2[0] != 0 or block2[1]):
            if block2[0] == 0:  # RFC 7959 §3.4: the first block of a larger notification; fetch the rest first
                task = asyncio.ensure_future(self._complete(device, message.token, observation, message, remote))
                self._completions.add(task)
                task.add_done_callback(self._completions.discard)
            return True  # a later block never comes as a notification: acknowledged and dropped
        self.stats.notifications += 1
        self._deliver(device.registration.device_id, observation.path, message.content_format, message.payload, seq)
        return True

    async def _complete(
        self, device: _Device, token: bytes, observation: _Observation, first: CoapMessage, remote: Address
    ) -> None:
        """Fetch the blocks after a notification's first one (GET Block2 num 1.. without Observe) and deliver
        the whole value, unless a newer notification came meanwhile (it carries the newer value)."""
        options = codes.path_options(observation.path)
        if observation.accept is not None:
            options.append((codes.ACCEPT, coap_encode_uint(observation.accept)))
        try:
            whole = await self._endpoint_for(device).complete_block2(remote, codes.GET, options, first)
        except DeviceError as error:
            log.info("rest of a block-wise notification of %s not fetched: %s", observation.path, error)
            return
        if whole.code >> 5 != 2 or device.observations.get(token) is not observation:
            return
        if first.observe is not None and observation.last_seq != first.observe:
            self.stats.stale_notifications += 1
            return
        self.stats.notifications += 1
        self._events.notification(
            device.registration.device_id, observation.path, whole.content_format, whole.payload, whole.observe
        )

    # ---- expiry -----------------------------------------------------------------------------------------
    async def _expire_forever(self) -> None:
        check: asyncio.Task[None] | None = None
        try:
            while True:
                await self._clock.sleep(EXPIRY_CHECK_INTERVAL)
                # the check awaits the store: run it beside the ticker, so the ticks stay on time (one at a time)
                self._expiry_ticks += 1
                for _, endpoint in self._endpoints:
                    endpoint.sweep()  # issue 14 #4: what a flood left behind goes, even when nothing follows
                if check is None or check.done():
                    check = asyncio.create_task(self._expire_checked(), name="lwm2m-expiry-check")
        finally:
            if check is not None:
                check.cancel()
                await asyncio.gather(check, return_exceptions=True)

    async def _expire_checked(self) -> None:
        while self._expiry_ticks:  # ticks that came while a check ran get one more check, with the time then
            self._expiry_ticks = 0
            try:
                await self._expire_due()
            except Exception:
                log.exception("expiry check failed")

    def _track(self, device: _Device) -> None:
        registration = device.registration
        self._deadlines.push(registration.device_id, self._expires_at(registration), registration.updated_at)

    def _expires_at(self, registration: Registration) -> float:
        return registration.updated_at + registration.lifetime + self._expiry_grace

    def _version(self, device_id: str) -> float | None:
        device = self._devices.get(device_id)
        return None if device is None else device.registration.updated_at

    async def _expire_due(self) -> None:
        now = self._clock.now()
        # the registrations held here, from the heap: O(log n) each, no scan
        for device_id in list(self._deadlines.due(now, self._version)):
            registration = self._devices[device_id].registration
            await self._expire(device_id, registration.updated_at, registration)
        self._deadlines.compact(
            len(self._devices),
            ((i, self._expires_at(d.registration), d.registration.updated_at) for i, d in self._devices.items()),
        )
        if self._store is None:
            return
        # the stored table has the rest (an index range, not a scan): registrations of devices that never came back
        # after a restart, or that another node served; in Redis mode the node whose conditional removal wins
        # announces, once
        for record in await self._store.registrations_expiring(now):
            cached = self._devices.get(record.device_id)
            if cached is not None and cached.registration.updated_at != record.updated_at:
                continue  # updated here, its new expiry not written yet (the next batch writes it)
            await self._expire(record.device_id, record.updated_at, _registration(record))

    async def _expire(self, device_id: str, updated_at: float, registration: Registration) -> None:
        """Expire the registration of `updated_at`; not one updated since (here or, with a store, on another node)."""
        await self.settled(device_id)  # its registration's own write comes first
        async with self._locks(device_id):
            if self._store is not None:
                removed = await self._store.remove_registration(device_id, updated_at=updated_at)
            cached = self._devices.get(device_id)
            current = cached is not None and cached.registration.updated_at == updated_at
            if self._store is None:
                removed = current  # without a store this copy is the registration
            if cached is not None and current:
                # expired now, or (removal lost) another node expired or updated it: this copy is stale either way
                self._forget(cached)
                registration = cached.registration
        if not removed:
            return
        log.info("registration of %s (%s) expired", registration.endpoint_name, device_id)
        try:
            await self._events.expired(registration)
        except Exception:
            log.exception("expiry handling failed for %s", device_id)
        self.stats.expirations += 1  # counted once handled: the device is deregistered in the store by now

    # ---- helpers ----------------------------------------------------------------------------------------
    def _require(self, device_id: str) -> _Device:
        device = self._devices.get(device_id)
        if device is None:
            raise NotRegistered(f"device {device_id} is not registered")
        return device

    def _endpoint_for(self, device: _Device) -> CoapEndpoint:
        registration = device.registration
        if registration.transport == TCP:
            return self._connection_endpoint(registration)
        endpoint = self._secure if registration.secure else self._endpoint
        if endpoint is None:
            raise NotRegistered("server stopped")
        return endpoint

    def _connection_endpoint(self, registration: Registration) -> CoapEndpoint:
        """The endpoint of the listener holding the device's connection, plain or TLS as it registered.

        RFC 8323 §3 and LwM2M 1.1 Transport §6.4: over TCP the server reaches the device only on the connection
        the device opened. Once that is closed (or this node restarted) the device is not connected until it
        connects again and sends Register or Update; a datagram to its TCP address would reach no one and wait
        out the whole CoAP retransmission schedule."""
        stream = self._live_stream(registration)
        if stream is not None:
            return stream.endpoint
        raise NotConnected(f"device {registration.device_id} registered over TCP has no open connection")

    def _live_stream(self, registration: Registration) -> StreamListener | None:
        """The TCP (or TLS) listener holding an open connection from the registration's address, if any."""
        for stream in self._streams:
            if stream.secure == registration.secure and stream.connected(registration.address):
                return stream
        return None

    def _forget_observation(self, device_id: str, token: bytes, *, only_ours: bool) -> None:
        device = self._devices.get(device_id)
        if device is None:
            return
        observation = device.observations.get(token)
        if observation is not None and not (only_ours and observation.auto):
            self._end_observation(device, token)
            self._spawn_forget(token)

    def _spawn_forget(self, token: bytes) -> None:
        if self._store is None:
            return
        task = asyncio.ensure_future(self._store.remove_observation(token))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


# the stored form of a fleet's links: the same few, built once (issue 16 #1: `_record` runs per stored registration)
_REGISTRATION_LINKS: InternTable[RegistrationLink] = InternTable(RegistrationLink)


def _record(registration: Registration, expires_at: float) -> RegistrationRecord:
    return RegistrationRecord(
        device_id=registration.device_id,
        account_id=registration.account_id,
        endpoint_name=registration.endpoint_name,
        endpoint_type=registration.endpoint_type,
        lifetime=registration.lifetime,
        binding=registration.binding,
        lwm2m_version=registration.lwm2m_version,
        links=tuple(_REGISTRATION_LINKS.get((k.path, k.rt, k.ct, k.obs, k.iface, k.aobs)) for k in registration.links),
        host=registration.address[0],
        port=registration.address[1],
        registered_at=registration.registered_at,
        updated_at=registration.updated_at,
        expires_at=expires_at,
        queue_mode=registration.queue_mode,
        domain=registration.domain,
        secure=registration.secure,
        transport=registration.transport,
        gateway=registration.gateway,
    )


def _registration(record: RegistrationRecord) -> Registration:
    return Registration(
        account_id=record.account_id,
        device_id=record.device_id,
        endpoint_name=record.endpoint_name,
        endpoint_type=record.endpoint_type,
        lifetime=record.lifetime,
        binding=record.binding,
        lwm2m_version=record.lwm2m_version,
        links=tuple(shared_link(k.path, k.rt, k.ct, k.obs, k.iface, k.aobs) for k in record.links),
        address=(record.host, record.port),
        registered_at=record.registered_at,
        updated_at=record.updated_at,
        queue_mode=record.queue_mode,
        domain=record.domain,
        secure=record.secure,
        transport=record.transport,
        gateway=record.gateway,
    )


def _observation_record(device: _Device, token: bytes, observation: _Observation) -> ObservationRecord:
    return ObservationRecord(
        token=token,
        device_id=device.registration.device_id,
        path=observation.path,
        auto=observation.auto,
        last_seq=observation.last_seq,
        last_at=observation.last_at,
    )


def vars_of(stats: object) -> dict[str, float]:
    return {name: getattr(stats, name) for name in stats.__slots__}  # type: ignore[attr-defined]


def _response(message: CoapMessage) -> DeviceResponse:
    return DeviceResponse(
        code=message.code, content_format=message.content_format, payload=message.payload, observe=message.observe
    )


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
