"""Edge Core's own LwM2M connection to the service, and the status it reports.

It is a full LwM2M client (the simulator's client code: reads, writes, observations) with its own objects:
1 Server (/1/0/8 registration update trigger), 3 Device (Edge version, /3/0/4 reboot = a clean restart of this
link: de-register, register afresh; /3/0/13 current time), the gateway object listing the child devices, and the
resources a gateway resource manager adds over `/1/grm` (cloud writes on those go to the manager).

Its life cycle follows the real connection: `connecting` while registering, `connected` after 2.01 with the device-
id the service assigned (the last Location-Path segment), `error` with the code when the server refuses (4.03 →
403), is unreachable past the retransmission window (504), or a keepalive goes unanswered (504). While idle it
sends a registration update every `keepalive_time` seconds; unanswered, it is sent again after `keepalive_interval`
and then with doubling waits (RFC 7252 back-off, three sends), so a dead link shows as `error` at most
keepalive_time + 10.5 × keepalive_interval after the last answer (spec §2.6: the status can lag).

The link is the simulator's: `coap://`, `coaps://` (DTLS with a PSK or a certificate, `security`; the handshake
comes with each Register, so a service not up yet shows as `connecting`/`error` and is retried), `coap+tcp://`
or `coaps+tcp://` (TLS with the same credentials, lwm2m/tls_stream.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from devicehub import __version__
from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceError, DeviceTimeout
from devicehub.domain.model import ResourceLink
from devicehub.edge.forwarding import (
    GRM_OBJECT_RESERVED,
    GRM_RESOURCE_EXISTS,
    RESOURCE_NOT_FOUND,
    Forward,
    Forwarded,
    ForwardingDevice,
    Objects,
    RpcError,
)
from devicehub.edge.status import ERROR, EdgeStatus
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.security import ClientCredentials
from devicehub.sim.device import PELION
from devicehub.sim.objects import INT, STRING, CurrentTime, Model, Resource

log = logging.getLogger("devicehub.edge")

# devicehub's gateway object: 0 child count, 1 child endpoint names (comma-separated). mbed-edge has no such object
# and does not reserve the number: Mbed Edge's simple-grm-example adds 33001, so the list gives way to a manager's
GATEWAY_OBJECT = 33001
# objects a gateway resource manager may not add: exactly mbed-edge's (edge-core/grm_api.c), Edge Core's own
RESERVED_OBJECTS = frozenset({1, 3, 14, 10252, 10255, 26241, 35011})
KEEPALIVE_TRIES = 3
MAX_BACKOFF = 60.0


def edge_model(endpoint_name: str, lifetime: int, now: Callable[[], float]) -> Model:
    return Model(
        objects={
            1: {
                0: {
                    0: Resource(0, INT, 1),
                    1: Resource(1, INT, lifetime, writable=True),
                    8: Resource(8, STRING, "", executable=True),  # Registration Update Trigger
                }
            },
            3: {
                0: {
                    0: Resource(0, STRING, "devicehub", published=True),
                    1: Resource(1, STRING, "edge-core", published=True),
                    2: Resource(2, STRING, endpoint_name, published=True),
                    3: Resource(3, STRING, __version__, published=True),  # Firmware Version = Edge version
                    4: Resource(4, STRING, "", executable=True),  # Reboot: restarts the upstream link
                    13: CurrentTime(13, now),  # Current Time
                }
            },
            GATEWAY_OBJECT: {0: {0: Resource(0, INT, 0), 1: Resource(1, STRING, "")}},
        }
    )


class EdgeClient(ForwardingDevice):
    """The upstream connection; `status` is the record GET /status serves."""

    def __init__(
        self,
        clock: Clock,
        server: Address,
        server_uri: str,
        endpoint_name: str,
        *,
        endpoint_type: str,
        lifetime: int,
        keepalive_time: float,
        keepalive_interval: float,
        security: ClientCredentials | None = None,
        tcp: bool = False,
    ) -> None:
        super().__init__(
            clock,
            server,
            endpoint_name,
            endpoint_type=endpoint_type,
            lifetime=lifetime,
            flavor=PELION,
            model=edge_model(endpoint_name, lifetime, clock.now),
            security=security,
            tcp=tcp,
        )
        # the keepalive (a registration update) is retransmitted after keepalive_interval, KEEPALIVE_TRIES sends in
        # all; registration itself keeps CoAP's own window, so an unreachable server shows within ~93 s
        self.update_timing = (keepalive_interval, KEEPALIVE_TRIES - 1)
        self.keepalive_time = keepalive_time
        self.status = EdgeStatus(endpoint_name=endpoint_name, lwm2m_server_uri=server_uri, edge_version=__version__)
        self.restarts = 0
        self._stopping = False
        self._child_list_shown = True  # until a gateway resource manager adds resources in GATEWAY_OBJECT

    def children_changed(self, names: list[str]) -> None:
        if not self._child_list_shown:
            return
        self.set_value(f"/{GATEWAY_OBJECT}/0/0", len(names))
        self.set_value(f"/{GATEWAY_OBJECT}/0/1", ",".join(names))

    async def add_resources(self, built: Objects, forward: Forward, owner: object) -> None:
        """A gateway resource manager's `add_resource`: the resources join this endpoint, announced upstream in a
        registration update before the call is answered."""
        for path in built.kinds:
            oid = int(path.split("/")[1])
            if oid in RESERVED_OBJECTS:
                raise RpcError(GRM_OBJECT_RESERVED, f"object {oid} is Edge Core's own")
            if self.model.resource(path) is not None and not self._is_child_list(oid):
                raise RpcError(GRM_RESOURCE_EXISTS, f"{path} already exists")
        withdrawn: list[ResourceLink] = []
        if self._child_list_shown and any(path.startswith(f"/{GATEWAY_OBJECT}/") for path in built.kinds):
            withdrawn = [ResourceLink(path=link.path, deleted=True) for link in self.links() if self._on_list(link)]
            del self.model.objects[GATEWAY_OBJECT]
            self._child_list_shown = False
            log.info(
                "edge %s: a gateway resource manager took object %d; its child list is withdrawn",
                self.endpoint_name,
                GATEWAY_OBJECT,
            )
        for oid, instances in built.model.objects.items():
            for iid, resources in instances.items():
                self.model.objects.setdefault(oid, {}).setdefault(iid, {}).update(resources)
        for path, kind in built.kinds.items():
            self.forwarded[path] = Forwarded(kind, built.operations[path], forward, owner)
        added = [link for link in self.links() if link.path in built.kinds]
        await self._announce([link for link in withdrawn if link.path not in built.kinds] + added)

    def _is_child_list(self, oid: int) -> bool:
        return oid == GATEWAY_OBJECT and self._child_list_shown

    def _on_list(self, link: ResourceLink) -> bool:
        return link.path.startswith(f"/{GATEWAY_OBJECT}/")

    def set_values(self, built: Objects, owner: object) -> None:
        """A manager's `write_resource_value`: values of resources it added (observers upstream are notified)."""
        unknown = [
            path for path in built.kinds if path not in self.forwarded or self.forwarded[path].owner is not owner
        ]
        if unknown:  # nothing is set when any resource is unknown
            raise RpcError(RESOURCE_NOT_FOUND, f"no gateway resource {unknown[0]}")
        for path in built.kinds:
            resource = built.model.resource(path)
            assert resource is not None
            self.set_value(path, resource.value)

    async def remove_resources(self, owner: object) -> None:
        """A manager went away: the resources it added go with it."""
        paths = [path for path, forwarded in self.forwarded.items() if forwarded.owner is owner]
        for path in paths:
            del self.forwarded[path]
            oid, iid, rid = (int(p) for p in path.split("/")[1:])
            instance = self.model.objects[oid][iid]
            del instance[rid]
            if not instance:
                del self.model.objects[oid][iid]
            if not self.model.objects[oid]:
                del self.model.objects[oid]
        await self._announce([ResourceLink(path=path, deleted=True) for path in paths])

    async def _announce(self, links: list[ResourceLink]) -> None:
        if links and self.registered.is_set():
            with contextlib.suppress(DeviceError):  # a failed update shows in the status; the next Register has them
                await self.update(links)

    def _rebooted(self) -> None:
        self._spawn(self._restart())  # after the 2.04 has gone out; Edge Core de-registers first

    async def _restart(self) -> None:
        """/3/0/4: end the registration cleanly and register afresh (a new registration, observations reset)."""
        if self._stopping or self._lifecycle is None:
            return
        self._lifecycle.cancel()
        await asyncio.gather(self._lifecycle, return_exceptions=True)
        if self.registered.is_set():
            with contextlib.suppress(DeviceError):
                await self.deregister()
        self.registered.clear()
        self.restarts += 1
        if not self._stopping:
            self._lifecycle = asyncio.create_task(self._run(), name=f"edge-{self.endpoint_name}")

    async def stop(self, *, deregister: bool = True) -> None:
        self._stopping = True
        await super().stop(deregister=deregister)

    def _idle_wait(self) -> float:
        # the keepalive doubles as the registration update: whichever comes first
        return min(self.keepalive_time, self._update_interval())

    async def _run(self) -> None:
        backoff = 1.0
        while True:
            try:
                if not self.registered.is_set():
                    await self._register_once()
                    backoff = 1.0
                await self.clock.sleep(self._idle_wait())
                await self.update()  # a 4.04 answer makes it register afresh: the id may change
                self._connected()
            except DeviceTimeout as error:  # unreachable past the retransmission window, or a dead link
                self._failed(504, f"no answer from the LwM2M server: {error}")
            except DeviceError as error:  # refused: a register (also the one after an update's 4.04) or update
                self._failed(_refusal_code(str(error)), f"the LwM2M server refused: {error}")
            if not self.registered.is_set():
                await self.clock.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def _register_once(self) -> None:
        if self.status.status != ERROR:  # after an error the status stays `error` until a registration succeeds
            self.status.connecting()
        await self.register()
        self._connected()

    def _failed(self, code: int, description: str) -> None:
        self.registered.clear()
        self.status.failed(code, description)
        log.warning("edge %s: %s (error %d)", self.endpoint_name, description, code)

    def _connected(self) -> None:
        account_id = self.location[1] if len(self.location) >= 3 else ""
        self.status.connected(account_id, self.device_id or "")


def _refusal_code(message: str) -> int:
    """`register answered 4.03` → 403."""
    dotted = message.rsplit(" ", 1)[-1]
    major, _, minor = dotted.partition(".")
    if major.isdigit() and minor.isdigit():
        return int(major) * 100 + int(minor)
    return 500
