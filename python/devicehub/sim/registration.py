"""The device's registration client: Register, Update, De-register (LwM2M 1.1 Core §6.2), kept up in the background.

The background loop registers (after a client-initiated bootstrap when one is set), updates before the lifetime
runs out, registers afresh when an Update is answered 4.04, waits out a 5.03's Max-Age and backs off on errors.
The state it keeps (location, device id, lifetime, …) lives on the device (`RegistrationHost`): tests and Edge Core
read and set it there.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Protocol

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.clock import Clock
from devicehub.domain.content_formats import LINK_FORMAT, OCTET_STREAM
from devicehub.domain.device_results import DeviceError, DeviceTimeout
from devicehub.domain.model import ResourceLink
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.links import format_links, quoted_string
from devicehub.lwm2m.security import ClientCredentials
from devicehub.sim.bootstrap import BootstrapClient, BootstrapError, Provisioned
from devicehub.sim.counters import DeviceCounters
from devicehub.sim.objects import BATTERY, OPAQUE, Model

log = logging.getLogger("devicehub.sim")

MAX_REGISTER_BACKOFF = 60.0
# de-registering on the way out: one send, so a server that is gone cannot hold a stop up for CoAP's ~93 s window
SHUTDOWN_TIMING = (1.0, 0)
DEFAULT_MAX_AGE = 60  # RFC 7252 §5.10.5: a response without Max-Age has Max-Age 60


class ServerBusy(DeviceError):
    """The server answered 5.03 Service Unavailable: retry after its Max-Age (RFC 7252 §5.9.3.4)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def register_failure(error: DeviceError) -> str:
    """Why a registration failed, in words an operator can act on (`devicehub simulate` prints it)."""
    text = str(error)
    if isinstance(error, DeviceTimeout):
        return "no answer from the server (is devicehub serve running there?)"
    if text.endswith("4.03"):  # no diagnostic: devicehub's answer to a name no account enrolled
        return "refused with 4.03 Forbidden (endpoint not enrolled: run the server with --dev, or enroll it)"
    if text.endswith("4.03: DTLS required"):
        return "refused with 4.03 Forbidden: DTLS required (use coaps:// with --psk-key or --cert, or --allow-nosec)"
    if "4.03: " in text:  # the server's diagnostic payload says why (RFC 7252 §5.5.2)
        return "refused with 4.03 Forbidden: " + text.split("4.03: ", 1)[1]
    return text


def _diagnostic(payload: bytes) -> str:
    """An error response's diagnostic payload (RFC 7252 §5.5.2: UTF-8, for people), bounded and printable."""
    text = payload[:200].decode("utf-8", "replace")
    return f": {text}" if payload and text.isprintable() else ""


class RegistrationHost(Protocol):
    """The device a registration client registers: its settings and registration state, and its transport."""

    clock: Clock
    server: Address
    endpoint_name: str
    endpoint_type: str
    lifetime: int
    queue_mode: bool
    security: ClientCredentials | None
    tcp: bool
    update_timing: tuple[float, int] | None  # (ACK timeout, retransmissions) of Updates only
    deregister_timing: tuple[float, int] | None  # SHUTDOWN_TIMING when stopping
    registration_query: list[str]  # more Register parameters (an Edge child's `gw=`)
    bootstrap: BootstrapClient | None
    location: list[str]
    device_id: str | None
    registered: asyncio.Event
    retry_after: float | None
    waiting_retry: bool
    last_failure: str
    counters: DeviceCounters

    @property
    def endpoint(self) -> CoapEndpoint: ...

    def links(self) -> list[ResourceLink]:
        """The object list an Update with the full list carries."""

    def register_payload(self) -> bytes:
        """The Register payload (the object list in link format)."""

    async def before_register(self) -> None:
        """Ready the transport for a Register (DTLS: the handshake) and end the observations."""

    def register_timed_out(self) -> None:
        """A Register went unanswered (DTLS: the server may have lost the session)."""

    def registered_as(self) -> None:
        """A Register succeeded (Pelion: the auto-observed resource starts notifying)."""

    async def _bootstrap_secure(self, bootstrap: BootstrapClient) -> Provisioned:
        """Bootstrap over DTLS, in a session of its own."""

    async def rebind(self, security: ClientCredentials | None) -> None:
        """Bind the transport again, towards `server` over plain UDP or DTLS with `security`."""


class RegistrationClient:
    """Registers `host` at its LwM2M server and keeps the registration up (see module docstring)."""

    def __init__(self, host: RegistrationHost, *, version: str, full_list_updates: bool = False) -> None:
        self.host = host
        self.version = version  # the `lwm2m=` Register parameter
        # Wakaama and Anjay: every Update carries the whole object list (LwM2M 1.1 §6.2.2), not only the lifetime
        self.full_list_updates = full_list_updates

    def update_interval(self) -> float:
        # Wakaama's rule (lwm2m-device-side.md §2): lt − 93 s, or lt/2 for short lifetimes
        lifetime = self.host.lifetime
        return lifetime - 93 if lifetime > 186 else lifetime / 2

    async def run(self) -> None:
        """Register, then update every `update_interval`, for ever; failures are counted and retried."""
        host = self.host
        counters = host.counters
        backoff = 1.0
        while True:
            try:
                if not host.registered.is_set():
                    if host.bootstrap is not None and counters.bootstraps == 0:
                        await self.run_bootstrap()
                    await self.register()
                    backoff = 1.0
                await host.clock.sleep(self.update_interval())
                await self.update()
            except ServerBusy as busy:
                counters.busy += 1
                host.retry_after = busy.retry_after
                log.debug("%s: %s; retrying in %.0f s", host.endpoint_name, busy, busy.retry_after)
                host.registered.clear()
                host.waiting_retry = True
                try:
                    await host.clock.sleep(busy.retry_after)
                finally:
                    host.waiting_retry = False
            except DeviceError as error:
                counters.errors += 1
                if not host.registered.is_set():
                    counters.register_failures += 1
                    host.last_failure = register_failure(error)
                if isinstance(error, DeviceTimeout):
                    counters.timeouts += 1
                else:
                    counters.rejected += 1
                log.debug("%s: %s; retrying in %.0f s", host.endpoint_name, error, backoff)
                host.registered.clear()
                await host.clock.sleep(backoff)
                backoff = min(backoff * 2, MAX_REGISTER_BACKOFF)

    async def run_bootstrap(self) -> None:
        """Client-initiated bootstrap (sim/bootstrap.py); the LwM2M server and lifetime are then the bootstrapped."""
        host = self.host
        bootstrap = host.bootstrap
        assert bootstrap is not None
        try:
            if bootstrap.credentials is None:
                provisioned = await bootstrap.run(host.endpoint)
            else:  # issue 28 #6: over DTLS, in a session of its own; the LwM2M server gets another
                provisioned = await host._bootstrap_secure(bootstrap)
            if not provisioned.server[0]:
                raise BootstrapError(f"cannot register at {provisioned.server_uri!r} with the security mode written")
        except DeviceError:
            host.counters.bootstrap_failures += 1
            raise
        rebind = host.tcp or provisioned.security != host.security or provisioned.security is not None
        host.server, host.lifetime = provisioned.server, provisioned.lifetime
        host.queue_mode = "Q" in provisioned.binding
        host.counters.bootstraps += 1
        if rebind:  # the socket was bound for the transport given at start (a DTLS client is bound to its server)
            await host.rebind(provisioned.security)

    async def register(self) -> None:
        host = self.host
        binding = "UQ" if host.queue_mode else "U"
        query = [f"ep={host.endpoint_name}", f"lt={host.lifetime}", f"b={binding}", f"lwm2m={self.version}"]
        if host.endpoint_type:
            query.append(f"et={host.endpoint_type}")
        query += host.registration_query
        options = [(codes.URI_PATH, b"rd"), (codes.CONTENT_FORMAT, coap_encode_uint(LINK_FORMAT))]
        options += [(codes.URI_QUERY, q.encode()) for q in query]
        await host.before_register()
        try:
            response = await host.endpoint.request(host.server, codes.POST, options, host.register_payload())
        except DeviceTimeout:
            host.register_timed_out()
            raise
        if response.code == codes.SERVICE_UNAVAILABLE:
            raise ServerBusy("register answered 5.03", _max_age(response))
        if response.code != codes.CREATED:
            raise DeviceError(f"register answered {codes.dotted(response.code)}{_diagnostic(response.payload)}")
        host.location = response.location_path
        host.device_id = host.location[-1]  # Pelion client: the last segment is the device id
        host.counters.registrations += 1
        host.registered_as()
        host.registered.set()

    async def update(self, links: list[ResourceLink] | None = None) -> int:
        """Registration update; a 4.04 answer makes the client register afresh. Returns the CoAP code."""
        host = self.host
        options = [(codes.URI_PATH, segment.encode()) for segment in host.location]
        payload = b""
        if links is None and self.full_list_updates:
            links = host.links()
        if links:
            options.append((codes.CONTENT_FORMAT, coap_encode_uint(LINK_FORMAT)))
            payload = format_links(links)
        response = await host.endpoint.request(host.server, codes.POST, options, payload, timing=host.update_timing)
        if response.code == codes.NOT_FOUND:
            host.registered.clear()
            await self.register()
        elif response.code == codes.SERVICE_UNAVAILABLE:
            raise ServerBusy("update answered 5.03", _max_age(response))
        elif response.code != codes.CHANGED:
            raise DeviceError(f"update answered {codes.dotted(response.code)}")
        else:
            host.counters.updates += 1
        return response.code

    async def deregister(self) -> None:
        host = self.host
        options = [(codes.URI_PATH, segment.encode()) for segment in host.location]
        host.registered.clear()
        await host.endpoint.request(host.server, codes.DELETE, options, timing=host.deregister_timing)


def instance_links(model: Model) -> list[ResourceLink]:
    """The OMA flavour's object list: one link per object instance; the Security object is never announced (LwM2M
    1.1 Core §6.2.1)."""
    return [ResourceLink(path=p) for p in model.instances() if not p.startswith("/0/")]


def resource_links(model: Model, auto_token: bytes) -> list[ResourceLink]:
    """The Pelion flavour's object list: one link per resource with its value, the battery auto-observed."""
    # the model's own dicts, in `Model.paths()` order: looking each path up again parsed it (issue 16: a fifth of a
    # simulated device's start and registration)
    links = []
    for oid, instances in model.objects.items():
        if oid == 0:
            continue
        for iid, resources in instances.items():
            for rid, resource in resources.items():
                path = f"/{oid}/{iid}/{rid}"
                links.append(
                    ResourceLink(
                        path=path,
                        ct=OCTET_STREAM if resource.kind == OPAQUE else None,
                        obs=not resource.executable,
                        value=resource.text() if resource.published else None,
                        aobs=int.from_bytes(auto_token, "big") if path == BATTERY else None,
                    )
                )
    return links


# (object, instance, resource, opaque, executable) → the fixed start of a resource's Pelion link, as format_links
# writes it; a handful of entries per process
_LINK_HEADS: dict[tuple[int, int, int, bool, bool], str] = {}


def _link_head(oid: int, iid: int, rid: int, opaque: bool, executable: bool) -> str:
    return f"</{oid}/{iid}/{rid}>" + (f";ct={OCTET_STREAM}" if opaque else "") + ("" if executable else ";obs")


def resource_links_payload(model: Model, auto_token: bytes) -> bytes:
    """`format_links(resource_links(model, auto_token))`, written straight from the model with each resource's fixed
    part (`<path>;ct=…;obs`) built once per process (issue 16: building a `ResourceLink` per resource and formatting
    it was most of a Pelion device's registration CPU). Only values and `aobs` differ per device."""
    heads = _LINK_HEADS
    aobs = f';aobs="{int.from_bytes(auto_token, "big")}"'
    parts = []
    for oid, instances in model.objects.items():
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
                    head += f";v={quoted_string(shown)}"
                if oid == 3 and iid == 0 and rid == 9:  # BATTERY: auto-observed
                    head += aobs
                parts.append(head)
    return ",".join(parts).encode()


def _max_age(response: CoapMessage) -> float:
    for number, value in response.options:
        if number == codes.MAX_AGE:
            return float(int.from_bytes(value, "big"))
    return float(DEFAULT_MAX_AGE)
