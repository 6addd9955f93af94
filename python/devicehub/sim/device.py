"""One simulated LwM2M client on its own UDP socket: registers, updates, answers the server, notifies.

Two flavours (lwm2m-device-side.md §0, §8): `oma` behaves like Wakaama/Anjay (object-instance links, NON
notifications, LwM2M 1.1); `pelion` like the Mbed/Pelion client (one link per resource with `;v=` values,
an `aobs` auto-observed resource that notifies with no Observe request, CON notifications, LwM2M 1.0).
`OmaBehaviour` switches on the habits of real clients that servers trip over (issue 12).

`SimDevice` binds the transport and puts the roles together: the registration client (sim/registration.py), the
responder (sim/responder.py), the observers (sim/observers.py) and the load hot path (sim/hot_path.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceError
from devicehub.domain.model import ResourceLink
from devicehub.lwm2m import codes, tcp
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.coap.parameters import ACK_TIMEOUT, BLOCK_SIZE, MAX_RETRANSMIT
from devicehub.lwm2m.dtls_client import DtlsClient
from devicehub.lwm2m.links import format_links
from devicehub.lwm2m.security import ClientCredentials
from devicehub.sim.bootstrap import BootstrapClient, Provisioned
from devicehub.sim.counters import DeviceCounters
from devicehub.sim.firmware import SimFirmware
from devicehub.sim.hot_path import HOT_MIN_BLOCK, HotPath
from devicehub.sim.objects import BATTERY, FLOAT, INT, TEMPERATURE, Model, Value, standard_model
from devicehub.sim.observers import Observers
from devicehub.sim.registration import (
    RegistrationClient,
    instance_links,
    resource_links,
    resource_links_payload,
)
from devicehub.sim.responder import DeviceLog, Reader, Responder

log = logging.getLogger("devicehub.sim")
REBOOT = "/3/0/4"  # Device object, Reboot (LwM2M 1.1 Appendix E.4)

OMA, PELION = "oma", "pelion"


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
        self.deregister_timing: tuple[float, int] | None = None  # SHUTDOWN_TIMING once the device is stopping
        self.registration_query: list[str] = []  # more Register parameters (an Edge child's `gw=`)
        # Edge Core forwards what the cloud writes or executes on a child to its protocol translator
        self.on_write: Callable[[str, Value], None] | None = None
        self.on_execute: Callable[[str, bytes], None] | None = None
        self.device_id: str | None = None
        self.firmware: SimFirmware | None = None  # object 5 (sim/firmware.py), when the device has it
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
        self.reader = Reader(self.model)
        self.observers = Observers(
            clock,
            self.model,
            self.counters,
            read=self.reader.read,
            send=self._send_notification,
            registered=self.registered,
            confirmable=self._confirmable,
            restart_seq=self.oma.restart_observe_seq,
        )
        self.responder = Responder(self.reader, self.observers, self.log)
        self.registration = RegistrationClient(
            self,
            version="1.1" if flavor == OMA else "1.0",
            full_list_updates=self.oma.full_list_updates,
        )
        # the load hot path (issue 16 #4, `simulate --hot-path`): see `HotPath.notify`
        self.hot_path = HotPath(
            self,
            self.model,
            self.observers,
            self.counters,
            read=self.reader.read,
            possible=self._hot_path_possible,
            endpoint=lambda: self.endpoint,
        )
        self.observers.on_change = self.hot_path.forget
        self._auto_token = random.randrange(1, 1024).to_bytes(2, "big")
        self._tasks: set[asyncio.Task[None]] = set()
        self._lifecycle: asyncio.Task[None] | None = None
        self._rebooting: asyncio.Task[None] | None = None
        self.reboots = 0

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
        self.hot_path.forget()  # its datagrams leave by the endpoint it chose them for

    async def rebind(self, security: ClientCredentials | None) -> None:
        """Close the transport and bind it again over plain UDP or DTLS with `security` (after a bootstrap)."""
        if self._endpoint is not None:
            await self._endpoint.close()
        self.security, self.tcp, self._dtls = security, False, None
        await self._bind()

    async def stop(self, *, deregister: bool = True) -> None:
        if self._lifecycle is not None:
            self._lifecycle.cancel()
            await asyncio.gather(self._lifecycle, return_exceptions=True)
        await self.observers.close()
        if self.firmware is not None:
            await self.firmware.close()
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

    @property
    def dtls(self) -> DtlsClient | None:
        """The DTLS session with the LwM2M server (None over plain CoAP or TCP): whether it is established and how
        many handshakes it took, read by whoever follows a device's sessions (tests of session loss and resumption)."""
        return self._dtls

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- registration (sim/registration.py) ----------------------------------------------------------
    async def _run(self) -> None:
        await self.registration.run()

    async def run_bootstrap(self) -> None:
        """Client-initiated bootstrap (sim/bootstrap.py); the LwM2M server and lifetime are then the bootstrapped."""
        await self.registration.run_bootstrap()

    async def _bootstrap_secure(self, bootstrap: BootstrapClient) -> Provisioned:
        """Bootstrap over DTLS at `bootstrap.server`, in a session of its own (issue 28 #6)."""
        assert bootstrap.credentials is not None
        endpoint = self._udp_endpoint()
        try:
            await DtlsClient.connect(self.host, self.clock, endpoint, bootstrap.server, bootstrap.credentials)
            return await bootstrap.run(endpoint)
        finally:
            await endpoint.close()  # and its DTLS session (close_notify)

    def _update_interval(self) -> float:
        return self.registration.update_interval()

    def links(self) -> list[ResourceLink]:
        if self.flavor == OMA:
            return instance_links(self.model)
        return resource_links(self.model, self._auto_token)

    def register_payload(self) -> bytes:
        """The Register payload: `format_links(self.links())` (the Pelion flavour's written straight from the model)."""
        if self.flavor == OMA:
            return format_links(self.links())
        return resource_links_payload(self.model, self._auto_token)

    async def before_register(self) -> None:
        self.observers.clear()  # a new registration ends every observation (lwm2m-device-side.md §4)
        if self._dtls is not None and not self._dtls.established:
            await self._dtls.handshake()

    def register_timed_out(self) -> None:
        if self._dtls is not None:  # the server may have lost the session (restart, sweep): a new one next
            self._dtls.close_session()

    def registered_as(self) -> None:
        if self.flavor == PELION:
            self.observers.observe_unasked(self._auto_token, BATTERY)

    async def register(self) -> None:
        await self.registration.register()

    async def update(self, links: list[ResourceLink] | None = None) -> int:
        """Registration update; a 4.04 answer makes the client register afresh. Returns the CoAP code."""
        return await self.registration.update(links)

    async def deregister(self) -> None:
        await self.registration.deregister()

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

    # ---- requests from the server (sim/responder.py) ---------------------------------------------------
    async def _handle(self, message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
        self.counters.requests += 1
        if self.bootstrap is not None and remote == self.bootstrap.server:
            return await self.bootstrap.handle(message, payload)
        return await self.responder.answer(message, payload, self._apply_write, self._execute)

    async def _apply_write(self, values: dict[str, Value]) -> Reply:
        """Store decoded values; a subclass may hand some to another owner first (edge/forwarding.py)."""
        reply = self.responder.store(values, self.on_write)
        if self.firmware is not None and reply.code == codes.CHANGED:
            for path, value in values.items():
                if path.startswith("/5/"):
                    self.firmware.written(path, value)
        return reply

    def _execute(self, path: str, payload: bytes) -> Reply:
        if self.firmware is not None and path.startswith("/5/"):
            return self.firmware.execute(path)
        reply = self.responder.execute(path, payload, self.on_execute)
        if path == "/1/0/8" and reply.code == codes.CHANGED:  # Registration Update Trigger
            self._spawn(self._update_soon())
        elif path == REBOOT and reply.code == codes.CHANGED:
            self._rebooted()
        return reply

    def _rebooted(self) -> None:
        """After the 2.04 has gone out (the task runs on the next turn of the loop), when the device runs its own
        registration: a device that registers by hand (`start(lifecycle=False)`) is the caller's to restart."""
        if self._lifecycle is not None and not self._lifecycle.done():
            self._rebooting = asyncio.create_task(self.reboot(), name=f"sim-{self.endpoint_name}-reboot")

    async def reboot(self) -> None:
        """Device object Reboot (/3/0/4): the device comes back as from a restart, its observations gone and a fresh
        Register sent (Pelion's system test `test_registration_notification` waits for it; issue 32 #5). The
        socket stays, so the server's requests in flight are still answered."""
        if self._lifecycle is not None:
            self._lifecycle.cancel()
            await asyncio.gather(self._lifecycle, return_exceptions=True)
        self.observers.clear()
        self.registered.clear()
        self.reboots += 1
        self._lifecycle = asyncio.create_task(self._run(), name=f"sim-{self.endpoint_name}")

    async def _update_soon(self) -> None:
        try:
            await self.update()
        except DeviceError as error:
            log.debug("%s: triggered update failed: %s", self.endpoint_name, error)

    @property
    def multi_value_format(self) -> int | None:
        """The format answering an instance/object read without Accept (None: TLV; Anjay 1.2 picks a CBOR one)."""
        return self.reader.multi_value_format

    @multi_value_format.setter
    def multi_value_format(self, content_format: int | None) -> None:
        self.reader.multi_value_format = content_format

    # ---- observations (sim/observers.py) ---------------------------------------------------------------
    def _send_notification(
        self, code: int, token: bytes, options: list[tuple[int, bytes]], payload: bytes, confirmable: bool
    ) -> Awaitable[None]:
        # not a coroutine of its own: the normal path makes one notification task per change
        return self.endpoint.send_notification(self.server, code, token, options, payload, confirmable=confirmable)

    def _confirmable(self) -> bool:
        return self.flavor == PELION if self.confirmable_notifications is None else self.confirmable_notifications

    def _hot_path_possible(self) -> bool:
        """NON notifications over plain UDP in datagrams the hot path's payload fits."""
        if self._confirmable() or self.tcp or self.security is not None:
            return False
        return self.oma.block_size >= HOT_MIN_BLOCK

    # ---- the simulated sensor ------------------------------------------------------------------------
    def set_value(self, path: str, value: Value) -> None:
        """Change a value as the device's own sensor would, and notify observers that want it."""
        resource = self.model.resource(path)
        if resource is None:
            raise KeyError(path)
        resource.value = value
        self.observers.changed(path)

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
