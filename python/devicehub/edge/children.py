"""Child devices of the gateway: each one a protocol translator added is registered upstream as its own LwM2M
endpoint (so the cloud API, subscriptions, echo and channels work on it); what the cloud writes or executes on
it goes back to its translator; value updates from the translator notify the observers upstream."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass

from devicehub.clock import Clock
from devicehub.edge.upstream import EdgeClient
from devicehub.lwm2m.transport import Address
from devicehub.sim.device import PELION, SimDevice
from devicehub.sim.objects import BOOL, FLOAT, INT, OPAQUE, STRING, TIME, Model, Resource, Value

log = logging.getLogger("devicehub.edge")

REGISTER_TIMEOUT = 30.0
READ, WRITE, EXECUTE = 1, 2, 4
TYPES = {"string": STRING, "int": INT, "float": FLOAT, "bool": BOOL, "time": TIME, "objlink": STRING, "opaque": OPAQUE}
MAX_CHILDREN = 1000

# what a translator hears: (device id, object, instance, resource, operation, base64 value)
WriteForward = Callable[[str, int, int, int, int, str], None]


class ChildError(Exception):
    """A translator request that cannot be done; `code` is the JSON-RPC error code (wire-format.md)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def decode_value(kind: str, data: str) -> Value:
    """A translator's base64 value in the type's binary form (Mbed Edge): big-endian numbers."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ChildError(-30101, f"value is not base64: {error}") from error
    try:
        if kind in (INT, TIME):
            return int.from_bytes(raw, "big", signed=True) if raw else 0
        if kind == FLOAT:
            return struct.unpack(">d" if len(raw) == 8 else ">f", raw)[0] if raw else 0.0
        if kind == BOOL:
            return raw not in (b"", b"\x00")
        if kind == OPAQUE:
            return raw
        return raw.decode()
    except (struct.error, UnicodeDecodeError) as error:
        raise ChildError(-30102, f"illegal value for a {kind} resource: {error}") from error


def encode_value(kind: str, value: Value) -> str:
    if kind in (INT, TIME):
        raw = int(value).to_bytes(8, "big", signed=True)
    elif kind == FLOAT:
        raw = struct.pack(">d", float(value))
    elif kind == BOOL:
        raw = b"\x01" if value else b"\x00"
    elif isinstance(value, bytes):
        raw = value
    else:
        raw = str(value).encode()
    return base64.b64encode(raw).decode()


@dataclass(slots=True)
class Child:
    device: SimDevice
    translator: str
    kinds: dict[str, str]  # path → value kind


def build_model(objects: object) -> tuple[Model, dict[str, str]]:
    """The LwM2M model of a `device_register` call's `objects`; ChildError -32602 when malformed."""
    if not isinstance(objects, list) or not objects:
        raise ChildError(-32602, "objects must be a non-empty list")
    model = Model()
    kinds: dict[str, str] = {}
    try:
        for obj in objects:
            oid = int(obj["objectId"])
            for instance in obj["objectInstances"]:
                iid = int(instance["objectInstanceId"])
                resources = model.objects.setdefault(oid, {}).setdefault(iid, {})
                for res in instance["resources"]:
                    rid, kind = int(res["resourceId"]), TYPES[res.get("type", "string")]
                    operations = int(res.get("operations", READ))
                    value = decode_value(kind, res.get("value", ""))
                    resources[rid] = Resource(
                        rid,
                        kind,
                        value,
                        writable=bool(operations & WRITE),
                        executable=bool(operations & EXECUTE),
                        published=True,
                    )
                    kinds[f"/{oid}/{iid}/{rid}"] = kind
    except (KeyError, TypeError, ValueError) as error:
        raise ChildError(-32602, f"malformed objects: {error!r}") from error
    if not all(0 <= int(p) <= 65535 for path in kinds for p in path.strip("/").split("/")):
        raise ChildError(-32602, "object, instance and resource ids are 0-65535")
    return model, kinds


class Children:
    """Every child device of this gateway, by device id (= its endpoint name upstream)."""

    def __init__(self, clock: Clock, server: Address, gateway: EdgeClient) -> None:
        self._clock = clock
        self._server = server
        self._gateway = gateway
        self._children: dict[str, Child] = {}

    def names(self) -> list[str]:
        return sorted(self._children)

    def get(self, device_id: str) -> Child | None:
        return self._children.get(device_id)

    async def register(
        self, translator: str, device_id: str, lifetime: int, queue_mode: bool, objects: object, forward: WriteForward
    ) -> None:
        if device_id in self._children:
            raise ChildError(-30005, f"endpoint {device_id} is already registered")
        if len(self._children) >= MAX_CHILDREN:
            raise ChildError(-30000, f"at most {MAX_CHILDREN} child devices")
        model, kinds = build_model(objects)
        device = SimDevice(
            self._clock,
            self._server,
            device_id,
            endpoint_type="MBED_DEVICE",
            lifetime=lifetime,
            queue_mode=queue_mode,
            flavor=PELION,
            model=model,
        )

        def on_write(path: str, value: Value) -> None:
            _, oid, iid, rid = path.split("/")
            forward(device_id, int(oid), int(iid), int(rid), WRITE, encode_value(kinds[path], value))

        def on_execute(path: str, payload: bytes) -> None:
            _, oid, iid, rid = path.split("/")
            forward(device_id, int(oid), int(iid), int(rid), EXECUTE, base64.b64encode(payload).decode())

        device.on_write, device.on_execute = on_write, on_execute
        self._children[device_id] = Child(device, translator, kinds)
        await device.start()
        try:
            await asyncio.wait_for(device.registered.wait(), REGISTER_TIMEOUT)
        except TimeoutError:
            await self.unregister(device_id)
            raise ChildError(-30007, f"{device_id} did not register upstream in {REGISTER_TIMEOUT:.0f} s") from None
        self._gateway.children_changed(self.names())

    async def unregister(self, device_id: str) -> None:
        child = self._children.pop(device_id, None)
        if child is None:
            raise ChildError(-30000, f"no child device {device_id}")
        await child.device.stop(deregister=True)
        self._gateway.children_changed(self.names())

    def update(self, device_id: str, objects: object) -> None:
        """Values a translator reports: set each resource (observers upstream are notified)."""
        child = self._children.get(device_id)
        if child is None:
            raise ChildError(-30000, f"no child device {device_id}")
        model, kinds = build_model(objects)
        unknown = [path for path in kinds if path not in child.kinds]
        if unknown:  # nothing is set when any resource is unknown
            raise ChildError(-30103, f"{device_id} has no resource {unknown[0]}")
        for path in kinds:
            resource = model.resource(path)
            assert resource is not None
            child.device.set_value(path, resource.value)

    async def remove_translator(self, translator: str) -> None:
        for device_id in [d for d, c in self._children.items() if c.translator == translator]:
            await self.unregister(device_id)

    async def stop(self) -> None:
        for device_id in list(self._children):
            child = self._children.pop(device_id)
            await child.device.stop(deregister=True)
