"""Child devices of the gateway: each one a protocol translator added is registered upstream as its own LwM2M
endpoint (so the cloud API, subscriptions, echo and channels work on it), with `gw=<Edge Core's endpoint name>` so
the directory shows Edge Core as its `host_gateway`; what the cloud writes or executes on it goes to its translator
and is answered with the translator's answer; value updates from the translator notify the observers upstream."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from devicehub.clock import Clock
from devicehub.edge.forwarding import (
    ENDPOINT_ALREADY_REGISTERED,
    ENDPOINT_LIMIT,
    INVALID_JSON_STRUCTURE,
    REQUEST_TIMEOUT,
    RESOURCE_NOT_FOUND,
    Forwarded,
    ForwardingDevice,
    RpcError,
    build_model,
)
from devicehub.edge.upstream import EdgeClient
from devicehub.lwm2m.coap.messages import Address
from devicehub.sim.device import PELION
from devicehub.sim.registration import SHUTDOWN_TIMING

log = logging.getLogger("devicehub.edge")

REGISTER_TIMEOUT = 30.0
MAX_CHILDREN = 1000

# what a translator hears: (device id, object, instance, resource, operation, base64 value); RpcError on failure
ChildForward = Callable[[str, int, int, int, int, str], Awaitable[None]]


@dataclass(slots=True)
class Child:
    device: ForwardingDevice
    translator: str
    kinds: dict[str, str]  # path → value kind
    operations: dict[str, int]  # path → operations bitmask as declared
    types: dict[str, str]  # path → type name as declared


class Children:
    """Every child device of this gateway, by device id (= its endpoint name upstream)."""

    def __init__(self, clock: Clock, server: Address, gateway: EdgeClient) -> None:
        self._clock = clock
        self._server = server
        self._gateway = gateway
        self._children: dict[str, Child] = {}
        self._shutting_down = False

    def names(self) -> list[str]:
        return sorted(self._children)

    def get(self, device_id: str) -> Child | None:
        return self._children.get(device_id)

    async def register(
        self, translator: str, device_id: str, lifetime: int, queue_mode: bool, objects: object, forward: ChildForward
    ) -> None:
        if device_id in self._children:
            raise RpcError(ENDPOINT_ALREADY_REGISTERED, f"endpoint {device_id} is already registered")
        if len(self._children) >= MAX_CHILDREN:
            raise RpcError(ENDPOINT_LIMIT, f"at most {MAX_CHILDREN} child devices")
        built = build_model(objects, code=INVALID_JSON_STRUCTURE)
        device = ForwardingDevice(
            self._clock,
            self._server,
            device_id,
            endpoint_type="MBED_DEVICE",
            lifetime=lifetime,
            queue_mode=queue_mode,
            flavor=PELION,
            model=built.model,
            # over coaps:// each child has its own session under the gateway's credentials: the service takes a
            # child registered with gw=<that identity> from it (lwm2m/server.py, issue 13 #7)
            security=self._gateway.security,
            tcp=self._gateway.tcp,
        )
        device.registration_query = [f"gw={self._gateway.endpoint_name}"]
        if self._shutting_down:
            device.deregister_timing = SHUTDOWN_TIMING

        def owner(kind: str, operations: int) -> Forwarded:
            async def to_translator(path: str, operation: int, value: str) -> None:
                _, oid, iid, rid = path.split("/")
                await forward(device_id, int(oid), int(iid), int(rid), operation, value)

            return Forwarded(kind, operations, to_translator)

        device.forwarded = {path: owner(kind, built.operations[path]) for path, kind in built.kinds.items()}
        self._children[device_id] = Child(device, translator, built.kinds, built.operations, built.types)
        await device.start()
        try:
            await asyncio.wait_for(device.registered.wait(), REGISTER_TIMEOUT)
        except TimeoutError:
            await self.unregister(device_id)
            raise RpcError(
                REQUEST_TIMEOUT, f"{device_id} did not register upstream in {REGISTER_TIMEOUT:.0f} s"
            ) from None
        self._gateway.children_changed(self.names())

    async def unregister(self, device_id: str) -> None:
        child = self._children.pop(device_id, None)
        if child is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"no child device {device_id}")
        await child.device.stop(deregister=True)
        self._gateway.children_changed(self.names())

    def update(self, device_id: str, objects: object) -> None:
        """Values a translator reports: set each resource (observers upstream are notified)."""
        child = self._children.get(device_id)
        if child is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"no child device {device_id}")
        built = build_model(objects, code=INVALID_JSON_STRUCTURE)
        unknown = [path for path in built.kinds if path not in child.kinds]
        if unknown:  # nothing is set when any resource is unknown
            raise RpcError(RESOURCE_NOT_FOUND, f"{device_id} has no resource {unknown[0]}")
        for path in built.kinds:
            resource = built.model.resource(path)
            assert resource is not None
            child.device.set_value(path, resource.value)

    async def remove_translator(self, translator: str) -> None:
        for device_id in [d for d, c in self._children.items() if c.translator == translator]:
            await self.unregister(device_id)

    def shutting_down(self) -> None:
        """From now on each de-registration is one send (forwarding.SHUTDOWN_TIMING)."""
        self._shutting_down = True
        for child in self._children.values():
            child.device.deregister_timing = SHUTDOWN_TIMING

    async def stop(self) -> None:
        self.shutting_down()
        children, self._children = list(self._children.values()), {}
        await asyncio.gather(*(child.device.stop(deregister=True) for child in children))
