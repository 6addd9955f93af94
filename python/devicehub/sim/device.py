"""One simulated LwM2M client on its own UDP socket: registers, updates, answers the server, notifies.

Two flavours (lwm2m-device-side.md §0, §8): `oma` behaves like Wakaama/Anjay (object-instance links, NON
notifications, LwM2M 1.1); `pelion` like the Mbed/Pelion client (one link per resource with `;v=` values,
an `aobs` auto-observed resource that notifies with no Observe request, CON notifications, LwM2M 1.0).
`OmaBehaviour` switches on the habits of real clients that servers trip over (issue 12).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from devicehub._core import CoapMessage, CoapNotification, coap_encode_uint
from devicehub.clock import Clock
from devicehub.lwm2m import codes, tcp
from devicehub.lwm2m.dtls_client import DtlsClient
from devicehub.lwm2m.errors import DeviceError, DeviceReset, DeviceTimeout
from devicehub.lwm2m.links import format_links
from devicehub.lwm2m.ports import ResourceLink
from devicehub.lwm2m.security import ClientCredentials
from devicehub.lwm2m.transport import ACK_TIMEOUT, BLOCK_SIZE, MAX_RETRANSMIT, Address, CoapEndpoint, Reply
from devicehub.sim import attributes
from devicehub.sim.bootstrap import BootstrapClient, BootstrapError, Provisioned
from devicehub.sim.objects import (
    BATTERY,
    CBOR_CFS,
    FLOAT,
    INT,
    LEGACY_TLV_CF,
    OPAQUE,
    OPAQUE_CF,
    TEMPERATURE,
    TEXT_CF,
    TLV_CF,
    BadValue,
    Model,
    Resource,
    Value,
    standard_model,
)

log = logging.getLogger("devicehub.sim")

OMA, PELION = "oma", "pelion"
MAX_REGISTER_BACKOFF = 60.0
DEFAULT_MAX_AGE = 60  # RFC 7252 §5.10.5: a response without Max-Age has Max-Age 60


class ServerBusy(DeviceError):
    """The server answered 5.03 Service Unavailable: retry after its Max-Age (RFC 7252 §5.9.3.4)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class OmaBehaviour:
    """Habits of real clients, each one a switch (defaults: the plain behaviour of the simulator so far)."""

    # Anjay: the answer to every Observe carries Observe 0 and the notifications count up from there, also
    # when the server observes again with the same token (avs_coap `_avs_coap_observe_initial_option_value`)
    restart_observe_seq: bool = False
    # the client's block size: reads and notifications above it go block-wise (Block2, a notification as its
    # first block, RFC 7959 §3.4), and its 2.31 answers ask for Block1 blocks of this size (§2.5)
    block_size: int = BLOCK_SIZE
    # the largest request payload one datagram may carry (the client's input buffer): above it the request is
    # answered 4.13 with Size1 (RFC 7959 §2.9.3); None: no limit
    max_payload: int | None = None
    # Wakaama and Anjay: every Update carries the whole object list (LwM2M 1.1 §6.2.2 — it replaces the registered
    # one), not only the registration's lifetime; objects the client dropped disappear with it
    full_list_updates: bool = False


@dataclass(slots=True)
class _Observer:
    path: str
    token: bytes
    accept: int | None
    seq: int = 0
    last_sent_at: float = 0.0
    last_value: float | None = None
    pending: asyncio.TimerHandle | None = None
    periodic: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class _Hot:
    """An observation the hot path notifies: its resource and its notification encoded once."""

    observer: _Observer
    resource: Resource
    template: CoapNotification
    integer: bool


HOT_MIN_BLOCK = 64  # the hot path sends one datagram: its payload (a send time: 17 bytes) must fit one block


@dataclass(slots=True)
class DeviceCounters:
    registrations: int = 0
    updates: int = 0
    notifications: int = 0
    errors: int = 0
    requests: int = 0
    bootstraps: int = 0
    bootstrap_failures: int = 0
    register_failures: int = 0
    # failures by cause, for the simulator's report
    acked: int = 0  # confirmable notifications the server acknowledged
    busy: int = 0  # 5.03 answers (the server shed load)
    timeouts: int = 0  # no answer within the retransmission window
    rejected: int = 0  # any other error answer


def register_failure(error: DeviceError) -> str:
    """Why a registration failed, in words an operator can act on (`devicehub simulate` prints it)."""
    text = str(error)
    if isinstance(error, DeviceTimeout):
        return "no answer from the server (is devicehub serve running there?)"
    if text.endswith("4.03"):
        return "refused with 4.03 Forbidden (endpoint not enrolled: run the server with --dev, or enroll it)"
    return text


@dataclass(slots=True)
class DeviceLog:
    """What the server asked of this device, for tests and the progress line."""

    writes: list[tuple[str, Value]] = field(default_factory=list)
    executes: list[tuple[str, bytes]] = field(default_factory=list)
    attribute_queries: list[tuple[str, list[str]]] = field(default_factory=list)
    observes: list[str] = field(default_factory=list)  # paths of Observe requests (GET Observe 0)
    block_reads: list[tuple[str, int]] = field(default_factory=list)  # (path, Block2 num) of later-block reads


class SimDevice:
    """A real LwM2M client (see module docstring)."""

    def __init__(
        self,
        clock: Clock,
        server: Address,
        endpoint_name: str,
        *,
        endpoint_type: str = "devicehub-sim",
        lifetime: int = 300,
        queue_mode: bool = False,
        flavor: str = PELION,
        host: str = "127.0.0.1",
        model: Model | None = None,
        ack_timeout: float = ACK_TIMEOUT,
        max_retransmit: int = MAX_RETRANSMIT,
        oma: OmaBehaviour | None = None,
        security: ClientCredentials | None = None,
        tcp: bool = False,
    ) -> None:
        if flavor not in (OMA, PELION):
            raise ValueError(f"flavor must be {OMA} or {PELION}")
        self.clock = clock
        self.server = server
        self.endpoint_name = endpoint_name
        self.endpoint_type = endpoint_type
        self.lifetime = lifetime
        self.queue_mode = queue_mode
        self.flavor = flavor
        self.host = host
        self.model = model if model is not None else standard_model(endpoint_name, lifetime, clock.now)
        self.ack_timeout, self.max_retransmit = ack_timeout, max_retransmit
        self.oma = oma if oma is not None else OmaBehaviour()
        self.security = security  # CoAPs (issue 13 #7): the server is then a DTLS listener (with `tcp`, a TLS one)
        self.tcp = tcp  # CoAP over TCP (RFC 8323, issue 13 #7): one connection to the server
        self.update_timing: tuple[float, int] | None = None  # (ACK timeout, retransmissions) of Updates only
        self.registration_query: list[str] = []  # more Register parameters (an Edge child's `gw=`)
        # Edge Core forwards what the cloud writes or executes on a child to its protocol translator
        self.on_write: Callable[[str, Value], None] | None = None
        self.on_execute: Callable[[str, bytes], None] | None = None
        self.device_id: str | None = None
        self.bootstrap: BootstrapClient | None = None  # set: bootstrap there first, then register where it says
        self.location: list[str] = []
        self.registered = asyncio.Event()
        self.retry_after: float | None = None  # the Max-Age of the last 5.03 answered (seconds)
        self.waiting_retry = False  # sleeping out that Max-Age
        self.confirmable_notifications: bool | None = None  # None: as the flavour does (Pelion CON, OMA NON)
        self.counters = DeviceCounters()
        self.last_failure = ""  # why the last registration failed, for the progress line
        self.log = DeviceLog()
        self._endpoint: CoapEndpoint | None = None
        self._dtls: DtlsClient | None = None
        self._observers: dict[bytes, _Observer] = {}
        # the format answering an instance/object read without Accept (None: TLV; Anjay 1.2 picks a CBOR one)
        self.multi_value_format: int | None = None
        self._attributes: dict[str, dict[str, float]] = {}
        self._hot: _Hot | None = None  # the observation the hot path notifies, once looked for
        self._hot_checked = False
        self._auto_token = random.randrange(1, 1024).to_bytes(2, "big")
        self._tasks: set[asyncio.Task[None]] = set()
        self._lifecycle: asyncio.Task[None] | None = None

    # ---- lifecycle --------------------------------------------------------------------------------
    async def start(self, *, lifecycle: bool = True) -> None:
        """Bind the socket; with `lifecycle`, register and keep the registration updated in the background."""
        await self._bind()
        if lifecycle:
            self._lifecycle = asyncio.create_task(self._run(), name=f"sim-{self.endpoint_name}")

    def _udp_endpoint(self) -> CoapEndpoint:
        return CoapEndpoint(
            self.clock,
            self._handle,
            ack_timeout=self.ack_timeout,
            max_retransmit=self.max_retransmit,
            block_size=self.oma.block_size,
            max_payload=self.oma.max_payload,
        )

    async def _bind(self) -> None:
        """The socket (and for CoAPs the DTLS client) towards `self.server` with `self.security`."""
        if self.tcp:
            endpoint = CoapEndpoint(
                self.clock,
                self._handle,
                block_size=self.oma.block_size,
                max_payload=self.oma.max_payload,
            )
            self.server = await tcp.connect(self.server[0], self.server[1], endpoint, security=self.security)
            self._endpoint = endpoint
        elif self.security is not None:
            endpoint = self._udp_endpoint()
            # the handshake comes with the first Register (`register`), so a service not up yet is retried
            self._dtls = await DtlsClient.bind(self.host, self.clock, endpoint, self.server, self.security)
            self._endpoint = endpoint
        else:
            self._endpoint = await CoapEndpoint.bind(
                self.host,
                0,
                self.clock,
                self._handle,
                ack_timeout=self.ack_timeout,
                max_retransmit=self.max_retransmit,
                block_size=self.oma.block_size,
                max_payload=self.oma.max_payload,
            )

    async def stop(self, *, deregister: bool = True) -> None:
        if self._lifecycle is not None:
            self._lifecycle.cancel()
            await asyncio.gather(self._lifecycle, return_exceptions=True)
        for observer in self._observers.values():
            self._cancel_timers(observer)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if deregister and self.registered.is_set():
            try:
                await self.deregister()
            except DeviceError:
                pass
        if self._endpoint is not None:
            await self._endpoint.close()

    @property
    def address(self) -> Address:
        assert self._endpoint is not None
        return self._endpoint.address

    @property
    def endpoint(self) -> CoapEndpoint:
        assert self._endpoint is not None, "start() first"
        return self._endpoint

    async def _run(self) -> None:
        backoff = 1.0
        while True:
            try:
                if not self.registered.is_set():
                    if self.bootstrap is not None and self.counters.bootstraps == 0:
                        await self.run_bootstrap()
                    await self.register()
                    backoff = 1.0
                await self.clock.sleep(self._update_interval())
                await self.update()
            except ServerBusy as busy:
                self.counters.busy += 1
                self.retry_after = busy.retry_after
                log.debug("%s: %s; retrying in %.0f s", self.endpoint_name, busy, busy.retry_after)
                self.registered.clear()
                self.waiting_retry = True
                try:
                    await self.clock.sleep(busy.retry_after)
                finally:
                    self.waiting_retry = False
            except DeviceError as error:
                self.counters.errors += 1
                if not self.registered.is_set():
                    self.counters.register_failures += 1
                    self.last_failure = register_failure(error)
                if isinstance(error, DeviceTimeout):
                    self.counters.timeouts += 1
                else:
                    self.counters.rejected += 1
                log.debug("%s: %s; retrying in %.0f s", self.endpoint_name, error, backoff)
                self.registered.clear()
                await self.clock.sleep(backoff)
                backoff = min(backoff * 2, MAX_REGISTER_BACKOFF)

    async def run_bootstrap(self) -> None:
        """Client-initiated bootstrap (sim/bootstrap.py); the LwM2M server and lifetime are then the bootstrapped."""
        bootstrap = self.bootstrap
        assert bootstrap is not None
        try:
            if bootstrap.credentials is None:
                provisioned = await bootstrap.run(self.endpoint)
            else:  # issue 28 #6: over DTLS, in a session of its own; the LwM2M server gets another
                provisioned = await self._bootstrap_secure(bootstrap)
            if not provisioned.server[0]:
                raise BootstrapError(f"cannot register at {provisioned.server_uri!r} with the security mode written")
        except DeviceError:
            self.counters.bootstrap_failures += 1
            raise
        rebind = self.tcp or provisioned.security != self.security or provisioned.security is not None
        self.server, self.lifetime = provisioned.server, provisioned.lifetime
        self.queue_mode = "Q" in provisioned.binding
        self.counters.bootstraps += 1
        if rebind:  # the socket was bound for the transport given at start (a DTLS client is bound to its server)
            if self._endpoint is not None:
                await self._endpoint.close()
            self.security, self.tcp, self._dtls = provisioned.security, False, None
            await self._bind()

    async def _bootstrap_secure(self, bootstrap: BootstrapClient) -> Provisioned:
        assert bootstrap.credentials is not None
        endpoint = self._udp_endpoint()
        try:
            await DtlsClient.connect(self.host, self.clock, endpoint, bootstrap.server, bootstrap.credentials)
            return await bootstrap.run(endpoint)
        finally:
            await endpoint.close()  # and its DTLS session (close_notify)

    def _update_interval(self) -> float:
        # Wakaama's rule (lwm2m-device-side.md §2): lt − 93 s, or lt/2 for short lifetimes
        return self.lifetime - 93 if self.lifetime > 186 else self.lifetime / 2

    # ---- registration interface -------------------------------------------------------------------
    def links(self) -> list[ResourceLink]:
        if self.flavor == OMA:  # the Security object is never announced (LwM2M 1.1 Core §6.2.1)
            return [ResourceLink(path=p) for p in self.model.instances() if not p.startswith("/0/")]
        # the model's own dicts, in `Model.paths()` order: looking each path up again parsed it (issue 16: a fifth
        # of a simulated device's start and registration)
        links = []
        for oid, instances in self.model.objects.items():
            if oid == 0:
                continue
            for iid, resources in instances.items():
                for rid, resource in resources.items():
                    path = f"/{oid}/{iid}/{rid}"
                    links.append(
                        ResourceLink(
                            path=path,
                            ct=OPAQUE_CF if resource.kind == OPAQUE else None,
                            obs=not resource.executable,
                            value=resource.text() if resource.published else None,
                            aobs=int.from_bytes(self._auto_token, "big") if path == BATTERY else None,
                        )
                    )
        return links

    def register_payload(self) -> bytes:
        """The Register payload: `format_links(self.links())`, written straight from the model with each resource's
        fixed part (`<path>;ct=…;obs`) built once per process (issue 16: building a `ResourceLink` per resource and
        formatting it was most of a Pelion device's registration CPU). Only values and `aobs` differ per device."""
        if self.flavor == OMA:
            return format_links(self.links())
        heads = _LINK_HEADS
        aobs = f';aobs="{int.from_bytes(self._auto_token, "big")}"'
        parts = []
        for oid, instances in self.model.objects.items():
            if oid == 0:
                continue
            for iid, resources in instances.items():
                for rid, resource in resources.items():
                    key = (oid, iid, rid, resource.kind == OPAQUE, resource.executable)
                    head = heads.get(key)
                    if head is None:
                        head = heads[key] = _link_head(*key)
                    if resource.published:
                        text = resource.text()
                        shown = base64.b64encode(text).decode() if resource.kind == OPAQUE else text.decode()
                        head += f';v="{shown}"'
                    if oid == 3 and iid == 0 and rid == 9:  # BATTERY: auto-observed
                        head += aobs
                    parts.append(head)
        return ",".join(parts).encode()

    async def register(self) -> None:
        binding = "UQ" if self.queue_mode else "U"
        query = [
            f"ep={self.endpoint_name}",
            f"lt={self.lifetime}",
            f"b={binding}",
            "lwm2m=1.1" if self.flavor == OMA else "lwm2m=1.0",
        ]
        if self.endpoint_type:
            query.append(f"et={self.endpoint_type}")
        query += self.registration_query
        options = [(codes.URI_PATH, b"rd"), (codes.CONTENT_FORMAT, coap_encode_uint(40))]
        options += [(codes.URI_QUERY, q.encode()) for q in query]
        for observer in self._observers.values():
            self._cancel_timers(observer)
        self._observers.clear()  # a new registration ends every observation (lwm2m-device-side.md §4)
        self._hot_changed()
        if self._dtls is not None and not self._dtls.established:
            await self._dtls.handshake()
        try:
            response = await self.endpoint.request(self.server, codes.POST, options, self.register_payload())
        except DeviceTimeout:
            if self._dtls is not None:  # the server may have lost the session (restart, sweep): a new one next
                self._dtls.close_session()
            raise
        if response.code == codes.SERVICE_UNAVAILABLE:
            raise ServerBusy("register answered 5.03", _max_age(response))
        if response.code != codes.CREATED:
            raise DeviceError(f"register answered {codes.dotted(response.code)}")
        self.location = response.location_path
        self.device_id = self.location[-1]  # Pelion client: the last segment is the device id
        self.counters.registrations += 1
        if self.flavor == PELION:
            self._observers[self._auto_token] = _Observer(path=BATTERY, token=self._auto_token, accept=None)
            self._hot_changed()
        self.registered.set()

    async def update(self, links: list[ResourceLink] | None = None) -> int:
        """Registration update; a 4.04 answer makes the client register afresh. Returns the CoAP code."""
        options = [(codes.URI_PATH, segment.encode()) for segment in self.location]
        payload = b""
        if links is None and self.oma.full_list_updates:
            links = self.links()
        if links:
            options.append((codes.CONTENT_FORMAT, coap_encode_uint(40)))
            payload = format_links(links)
        response = await self.endpoint.request(self.server, codes.POST, options, payload, timing=self.update_timing)
        if response.code == codes.NOT_FOUND:
            self.registered.clear()
            await self.register()
        elif response.code == codes.SERVICE_UNAVAILABLE:
            raise ServerBusy("update answered 5.03", _max_age(response))
        elif response.code != codes.CHANGED:
            raise DeviceError(f"update answered {codes.dotted(response.code)}")
        else:
            self.counters.updates += 1
        return response.code

    async def deregister(self) -> None:
        options = [(codes.URI_PATH, segment.encode()) for segment in self.location]
        self.registered.clear()
        await self.endpoint.request(self.server, codes.DELETE, options)

    async def send_values(self, paths: list[str]) -> int:
        """LwM2M 1.1 Send (`POST /dp`) of the current values in SenML JSON; returns the CoAP code."""
        import msgspec

        records = []
        for path in paths:
            resource = self.model.resource(path)
            assert resource is not None
            value = resource.value
            records.append({"n": path, "v": value} if resource.kind in (INT, FLOAT) else {"n": path, "vs": str(value)})
        options = [(codes.URI_PATH, b"dp"), (codes.CONTENT_FORMAT, coap_encode_uint(110))]
        response = await self.endpoint.request(self.server, codes.POST, options, msgspec.json.encode(records))
        return response.code

    # ---- values ------------------------------------------------------------------------------------
    def set_value(self, path: str, value: Value) -> None:
        """Change a value as the device's own sensor would, and notify observers that want it."""
        resource = self.model.resource(path)
        if resource is None:
            raise KeyError(path)
        resource.value = value
        self._changed(path)

    def _changed(self, path: str) -> None:
        now = self.clock.now()
        for observer in list(self._observers.values()):
            if path == observer.path or path.startswith(observer.path + "/"):
                self._maybe_notify(observer, now)

    def _maybe_notify(self, observer: _Observer, now: float) -> None:
        rules = attributes.effective(self._attributes, observer.path)
        current = self._numeric(observer.path)
        if not rules.should_notify(observer.last_value, current, now - observer.last_sent_at):
            return
        wait = (rules.pmin or 0) - (now - observer.last_sent_at)
        if wait > 0:  # the Observe response counts as the first notification
            if observer.pending is None:  # pmin: one deferred notification carries the latest value
                observer.pending = asyncio.get_running_loop().call_later(wait, self._deferred, observer)
            return
        self._spawn(self._notify(observer))

    def _deferred(self, observer: _Observer) -> None:
        observer.pending = None
        self._spawn(self._notify(observer))

    def _numeric(self, path: str) -> float | None:
        resource = self.model.resource(path)
        if resource is None or resource.kind not in (INT, FLOAT):
            return None
        return float(resource.value)

    async def _notify(self, observer: _Observer) -> None:
        if observer.token not in self._observers or not self.registered.is_set():
            return
        reply = self._read(observer.path, observer.accept)
        observer.seq = (observer.seq + 1) & 0xFFFFFF
        observer.last_sent_at = self.clock.now()
        observer.last_value = self._numeric(observer.path)
        options = [(codes.OBSERVE, coap_encode_uint(observer.seq)), *reply.options]
        confirmable = (
            self.flavor == PELION if self.confirmable_notifications is None else self.confirmable_notifications
        )
        try:
            await self.endpoint.send_notification(
                self.server, reply.code, observer.token, options, reply.payload, confirmable=confirmable
            )
            self.counters.notifications += 1
            self.counters.acked += confirmable
        except DeviceReset:
            self._drop_observer(observer.token)  # reactive cancel (RFC 7641 §3.6)
        except DeviceError:
            self.counters.errors += 1

    def _drop_observer(self, token: bytes) -> None:
        self._hot_changed()
        observer = self._observers.pop(token, None)
        if observer is not None:
            self._cancel_timers(observer)

    @staticmethod
    def _cancel_timers(observer: _Observer) -> None:
        if observer.pending is not None:
            observer.pending.cancel()
        if observer.periodic is not None:
            observer.periodic.cancel()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _periodic(self, observer: _Observer) -> None:
        """pmax: notify at least every pmax seconds even without a change."""
        while True:
            pmax = attributes.effective(self._attributes, observer.path).pmax
            if not pmax:
                return
            await self.clock.sleep(max(pmax - (self.clock.now() - observer.last_sent_at), 0.05))
            if self.clock.now() - observer.last_sent_at >= pmax:
                await self._notify(observer)

    # ---- requests from the server ------------------------------------------------------------------
    async def _handle(self, message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
        self.counters.requests += 1
        if self.bootstrap is not None and remote == self.bootstrap.server:
            return await self.bootstrap.handle(message, payload)
        path = message.uri_path
        if path.strip("/").split("/")[0] == "0":
            return Reply(codes.UNAUTHORIZED)  # the Security object is for the bootstrap server only
        code = message.code
        if code == codes.GET:
            if message.observe == 0:
                self.log.observes.append(path)
                return self._observe(message, path)
            block2 = message.block2
            if block2 is not None and block2[0] > 0:
                self.log.block_reads.append((path, block2[0]))
            if message.observe == 1:
                self._drop_observer(message.token)
            return self._read(path, message.accept)
        if code == codes.PUT:
            if not payload and message.uri_query:
                return self._write_attributes(path, message.uri_query)
            return await self._write(path, message.content_format, payload)
        if code == codes.POST:
            if self.model.resource(path) is not None:
                return self._execute(path, payload)
            return await self._write(path, message.content_format, payload)
        return Reply(codes.METHOD_NOT_ALLOWED)

    def _read(self, path: str, accept: int | None) -> Reply:
        if not self.model.exists(path):
            return Reply(codes.NOT_FOUND)
        resource = self.model.resource(path)
        if resource is not None and resource.executable:
            return Reply(codes.METHOD_NOT_ALLOWED)
        cf_option = codes.CONTENT_FORMAT
        if resource is not None and accept in (None, TEXT_CF, OPAQUE_CF):
            if resource.kind == OPAQUE and accept != TEXT_CF:
                return Reply(codes.CONTENT, [(cf_option, coap_encode_uint(OPAQUE_CF))], resource.tlv_value())
            if accept == OPAQUE_CF:
                return Reply(codes.NOT_ACCEPTABLE)
            return Reply(codes.CONTENT, [(cf_option, coap_encode_uint(TEXT_CF))], resource.text())
        if accept is None and resource is None:
            accept = self.multi_value_format
        if accept in CBOR_CFS:
            assert accept is not None
            return Reply(codes.CONTENT, [(cf_option, coap_encode_uint(accept))], self.model.read_cbor(path, accept))
        if accept not in (None, TLV_CF, LEGACY_TLV_CF):
            return Reply(codes.NOT_ACCEPTABLE)
        return Reply(codes.CONTENT, [(cf_option, coap_encode_uint(TLV_CF))], self.model.read_tlv(path))

    def _observe(self, message: CoapMessage, path: str) -> Reply:
        reply = self._read(path, message.accept)
        if reply.code != codes.CONTENT:
            return reply
        observer = self._observers.get(message.token)
        if observer is None or observer.path != path:
            observer = _Observer(path=path, token=message.token, accept=message.accept)
            self._observers[message.token] = observer
            self._hot_changed()
        elif self.oma.restart_observe_seq:
            observer.seq = 0  # a re-observe opens a new stream at 0
        observer.last_sent_at = self.clock.now()
        observer.last_value = self._numeric(path)
        self._start_periodic(observer)
        return Reply(reply.code, [(codes.OBSERVE, coap_encode_uint(observer.seq)), *reply.options], reply.payload)

    def _start_periodic(self, observer: _Observer) -> None:
        if observer.periodic is None or observer.periodic.done():
            if attributes.effective(self._attributes, observer.path).pmax:
                observer.periodic = asyncio.ensure_future(self._periodic(observer))

    async def _write(self, path: str, content_format: int | None, payload: bytes) -> Reply:
        values = self._decode_write(path, content_format, payload)
        if isinstance(values, Reply):
            return values
        return await self._apply_write(values)

    def _decode_write(self, path: str, content_format: int | None, payload: bytes) -> dict[str, Value] | Reply:
        """What a write to `path` carries, by resource path; a Reply when it cannot be written."""
        if not self.model.exists(path):
            return Reply(codes.NOT_FOUND)
        try:
            if content_format in (TLV_CF, LEGACY_TLV_CF):
                return self.model.decode_tlv_write(path, payload)
            if content_format in CBOR_CFS:
                assert content_format is not None
                return self.model.decode_cbor_write(path, content_format, payload)
            resource = self.model.resource(path)
            if resource is None:
                return Reply(codes.BAD_REQUEST, payload=b"instance writes need TLV")
            if content_format == OPAQUE_CF:
                return {path: payload} if resource.kind == OPAQUE else Reply(codes.UNSUPPORTED_FORMAT)
            if content_format in (None, TEXT_CF):
                return {path: resource.parse_text(payload)}
            return Reply(codes.UNSUPPORTED_FORMAT)
        except KeyError:
            return Reply(codes.NOT_FOUND)
        except BadValue as error:
            return Reply(codes.BAD_REQUEST, payload=str(error).encode()[:100])

    async def _apply_write(self, values: dict[str, Value]) -> Reply:
        """Store decoded values; a subclass may hand some to another owner first (edge/forwarding.py)."""
        resources: list[tuple[str, Resource]] = []
        for target in values:
            resource = self.model.resource(target)
            assert resource is not None
            if not resource.writable:
                return Reply(codes.METHOD_NOT_ALLOWED)  # nothing is written when any target is read-only
            resources.append((target, resource))
        for target, resource in resources:
            resource.value = values[target]
            self.log.writes.append((target, values[target]))
            if self.on_write is not None:
                self.on_write(target, values[target])
            self._changed(target)
        return Reply(codes.CHANGED)

    def _write_attributes(self, path: str, query: list[str]) -> Reply:
        if not self.model.exists(path):
            return Reply(codes.NOT_FOUND)
        try:
            self._attributes[path] = attributes.parse_query(query, self._attributes.get(path, {}))
        except attributes.BadAttribute as error:
            return Reply(codes.BAD_REQUEST, payload=str(error).encode()[:100])
        self.log.attribute_queries.append((path, list(query)))
        self._hot_changed()
        for observer in self._observers.values():
            if observer.path == path or observer.path.startswith(path + "/") or path.startswith(observer.path + "/"):
                self._start_periodic(observer)
        return Reply(codes.CHANGED)

    def _execute(self, path: str, payload: bytes) -> Reply:
        resource = self.model.resource(path)
        assert resource is not None
        if not resource.executable:
            return Reply(codes.METHOD_NOT_ALLOWED)
        self.log.executes.append((path, payload))
        if self.on_execute is not None:
            self.on_execute(path, payload)
        if path == "/1/0/8":
            self._spawn(self._update_soon())
        return Reply(codes.CHANGED)

    async def _update_soon(self) -> None:
        try:
            await self.update()
        except DeviceError as error:
            log.debug("%s: triggered update failed: %s", self.endpoint_name, error)

    # ---- the simulated sensor ------------------------------------------------------------------------
    async def vary(self, rate: float, rng: random.Random) -> None:
        """Random-walk the temperature `rate` times a second (and drain the battery now and then)."""
        if rate <= 0:
            return
        while True:
            await self.clock.sleep(rng.expovariate(rate))
            self.vary_once(rng)

    def vary_once(self, rng: random.Random) -> None:
        """One change of the sensor: the temperature moves, and the battery drains one time in twenty."""
        if not self.registered.is_set():
            return
        temperature = self.model.resource(TEMPERATURE)
        assert temperature is not None
        self.set_value(TEMPERATURE, round(float(temperature.value) + rng.uniform(-0.5, 0.5), 2))
        if rng.random() < 0.05:
            battery = self.model.resource(BATTERY)
            assert battery is not None
            self.set_value(BATTERY, max(int(battery.value) - 1, 0))

    # ---- the notification hot path (issue 16 #4) -------------------------------------------------------
    def hot_notify(self, now: float, step: float, payload: bytes | None = None) -> bool:
        """Change the observed resource's value by `step` (an integer one by 1 towards the sign of `step`, within
        0-100) and send its notification from the observation's datagram encoded once: only the message ID,
        Observe and payload are filled in. `payload` (a send time, to measure latency) replaces the value's text.

        False, with nothing sent or changed, when this device cannot take the hot path now: not registered, no
        observation of a number in plain text, confirmable notifications (they wait for an ACK), notification
        attributes (pmin, pmax, gt, lt, st are judged on the normal path), DTLS or TCP; the caller then takes the
        normal path (`vary_once`)."""
        hot = self._hot if self._hot_checked else self._find_hot()
        if hot is None or not self.registered.is_set():
            return False
        resource, observer, endpoint = hot.resource, hot.observer, self._endpoint
        assert endpoint is not None
        if step:
            if hot.integer:
                resource.value = min(max(int(resource.value) + (1 if step > 0 else -1), 0), 100)
            else:
                resource.value = round(float(resource.value) + step, 2)
        observer.seq = (observer.seq + 1) & 0xFFFFFF
        observer.last_sent_at = now
        datagram = hot.template.encode(endpoint.new_mid(), observer.seq, payload or resource.text())
        endpoint.send_datagram(datagram, self.server)
        self.counters.notifications += 1
        return True

    def _hot_changed(self) -> None:
        self._hot, self._hot_checked = None, False

    def _find_hot(self) -> _Hot | None:
        """The newest observation the hot path can notify (see `hot_notify`), its notification encoded once: the
        server's own Observe of a resource comes after the Pelion flavour's auto-observation of it, and the server
        then knows the resource by its own token."""
        self._hot_checked = True
        confirmable = (
            self.flavor == PELION if self.confirmable_notifications is None else self.confirmable_notifications
        )
        if confirmable or self._attributes or self.tcp or self.security is not None:
            return None
        if self.oma.block_size < HOT_MIN_BLOCK:
            return None
        for observer in reversed(self._observers.values()):
            resource = self.model.resource(observer.path)
            if resource is None or resource.kind not in (INT, FLOAT) or resource.executable:
                continue
            if observer.accept not in (None, TEXT_CF):
                continue
            reply = self._read(observer.path, observer.accept)  # the options the normal path sends
            template = CoapNotification(codes.NON, reply.code, observer.token, reply.options)
            self._hot = _Hot(observer, resource, template, resource.kind == INT)
            return self._hot
        return None


# (object, instance, resource, opaque, executable) → the fixed start of a resource's Pelion link, as format_links
# writes it; a handful of entries per process
_LINK_HEADS: dict[tuple[int, int, int, bool, bool], str] = {}


def _link_head(oid: int, iid: int, rid: int, opaque: bool, executable: bool) -> str:
    return f"</{oid}/{iid}/{rid}>" + (f";ct={OPAQUE_CF}" if opaque else "") + ("" if executable else ";obs")


def _max_age(response: CoapMessage) -> float:
    for number, value in response.options:
        if number == codes.MAX_AGE:
            return float(int.from_bytes(value, "big"))
    return float(DEFAULT_MAX_AGE)
