"""The simulated device's LwM2M objects: 3 Device, 1 Server, 3303 Temperature, 3311 Light Control.

Values are typed so that text, opaque and TLV encodings come out as a real client's would
(lwm2m-device-side.md §5, §6). Reads of an instance or object answer TLV. Each resource's type and operations come
from the OMA registry's definition of it (`defined`), the same definitions the service checks requests against
(issue 32 #1), so the simulator and the service cannot disagree on what a resource is.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from devicehub._core import (
    TLV_OBJECT_INSTANCE,
    TLV_RESOURCE,
    CborError,
    TlvError,
    TlvNode,
    lwm2m_cbor_decode,
    lwm2m_cbor_encode,
    senml_cbor_decode,
    senml_cbor_encode,
    tlv_bool,
    tlv_decode,
    tlv_encode,
    tlv_float,
    tlv_int,
    tlv_read_bool,
    tlv_read_float,
    tlv_read_int,
)
from devicehub.domain.content_formats import LWM2M_CBOR, SENML_CBOR
from devicehub.domain.object_catalog import registry

Value = int | float | bool | str | bytes

INT, FLOAT, BOOL, STRING, OPAQUE, TIME = "int", "float", "bool", "string", "opaque", "time"

CBOR_CFS = (SENML_CBOR, LWM2M_CBOR)

TEMPERATURE = "/3303/0/5700"
BATTERY = "/3/0/9"  # auto-observed by the Pelion flavour: notifies with no subscription (spec §3.2)
READ_ONLY = "/3/0/0"  # Manufacturer: writes answer 4.05


# a definition's data type (OMA-TS-LightweightM2M_Core Appendix C) as the simulator keeps the value; links and an
# executable resource's (none) are kept as text
_KINDS = {
    "integer": INT,
    "unsigned integer": INT,
    "float": FLOAT,
    "boolean": BOOL,
    "string": STRING,
    "opaque": OPAQUE,
    "time": TIME,
    "objlnk": STRING,
    "corelnk": STRING,
    "": STRING,
}


class BadValue(ValueError):
    """A written payload does not hold a value of the resource's type."""


@dataclass(slots=True)
class Resource:
    rid: int
    kind: str
    value: Value
    writable: bool = False
    executable: bool = False
    published: bool = False  # Pelion: announced with its value in the registration (`;v=`)

    def text(self) -> bytes:
        if self.kind == OPAQUE:
            assert isinstance(self.value, bytes)
            return base64.b64encode(self.value)
        if self.kind == BOOL:
            return b"1" if self.value else b"0"
        if self.kind == FLOAT:
            return repr(float(self.value)).encode()
        if isinstance(self.value, bytes):
            return self.value
        return str(self.value).encode()

    def tlv_value(self) -> bytes:
        if self.kind in (INT, TIME):
            return tlv_int(int(self.value))
        if self.kind == FLOAT:
            return tlv_float(float(self.value))
        if self.kind == BOOL:
            return tlv_bool(bool(self.value))
        if isinstance(self.value, bytes):
            return self.value
        return str(self.value).encode()

    def tlv(self) -> TlvNode:
        return TlvNode(TLV_RESOURCE, self.rid, self.tlv_value())

    def parse_text(self, payload: bytes) -> Value:
        try:
            text = payload.decode()
            if self.kind in (INT, TIME):
                return int(text)
            if self.kind == FLOAT:
                return float(text)
            if self.kind == BOOL:
                if text not in ("0", "1", "true", "false"):
                    raise BadValue(f"not a boolean: {text!r}")
                return text in ("1", "true")
            if self.kind == OPAQUE:
                return base64.b64decode(text, validate=True)
            return text
        except (UnicodeDecodeError, ValueError, binascii.Error) as error:
            raise BadValue(str(error)) from error

    def typed(self) -> Value:
        """The value as a typed format (CBOR) carries it."""
        if self.kind in (INT, TIME):
            return int(self.value)
        if self.kind == FLOAT:
            return float(self.value)
        if self.kind == BOOL:
            return bool(self.value)
        return self.value

    def parse_typed(self, value: Value) -> Value:
        """A CBOR-written value checked against the resource type (an int is a valid float)."""
        ok = {
            INT: isinstance(value, int) and not isinstance(value, bool),
            TIME: isinstance(value, int) and not isinstance(value, bool),
            FLOAT: isinstance(value, (int, float)) and not isinstance(value, bool),
            BOOL: isinstance(value, bool),
            STRING: isinstance(value, str),
            OPAQUE: isinstance(value, bytes),
        }[self.kind]
        if not ok:
            raise BadValue(f"{type(value).__name__} written to a {self.kind} resource")
        return float(value) if self.kind == FLOAT else value

    def parse_tlv_value(self, data: bytes) -> Value:
        try:
            if self.kind in (INT, TIME):
                return tlv_read_int(data)
            if self.kind == FLOAT:
                return tlv_read_float(data)
            if self.kind == BOOL:
                return tlv_read_bool(data)
            if self.kind == OPAQUE:
                return data
            return data.decode()
        except (TlvError, UnicodeDecodeError) as error:
            raise BadValue(str(error)) from error


def defined(object_id: int, resource_id: int, value: Value, *, published: bool = False) -> Resource:
    """A resource with the type and operations the OMA registry's definition gives it (a simulated object is one the
    registry defines: KeyError otherwise)."""
    kind, writable, executable = _typing(object_id, resource_id)
    return Resource(resource_id, kind, value, writable=writable, executable=executable, published=published)


@functools.cache  # a fleet of 100 000 builds each of its 19 resources per device: look each definition up once
def _typing(object_id: int, resource_id: int) -> tuple[str, bool, bool]:
    definition = registry()[object_id].resource(resource_id)
    if definition is None:
        raise KeyError(f"/{object_id}/x/{resource_id} is not in the registry's object {object_id}")
    return _KINDS[definition.type], definition.writable, definition.executable


class CurrentTime(Resource):
    """/3/0/13 Current Time: moves with the (injected) clock; a write sets the offset from it."""

    def __init__(self, rid: int, now: Callable[[], float]) -> None:
        self._now = now
        self._offset = 0
        typed = defined(3, rid, 0)
        super().__init__(rid, typed.kind, int(now()), writable=typed.writable)

    @property
    def value(self) -> Value:
        return int(self._now()) + self._offset

    @value.setter
    def value(self, value: Value) -> None:
        self._offset = int(value) - int(self._now())


@dataclass(slots=True)
class Model:
    """Object → instance → resource."""

    objects: dict[int, dict[int, dict[int, Resource]]] = field(default_factory=dict)

    def resource(self, path: str) -> Resource | None:
        ids = _ids(path)
        if ids is None or len(ids) != 3:
            return None
        return self.objects.get(ids[0], {}).get(ids[1], {}).get(ids[2])

    def exists(self, path: str) -> bool:
        ids = _ids(path)
        if ids is None or not 1 <= len(ids) <= 3:
            return False
        node: object = self.objects
        for part in ids:
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    def read_tlv(self, path: str) -> bytes:
        """TLV of a resource, an instance (its resources) or an object (its instances)."""
        ids = _ids(path) or []
        if len(ids) == 3:
            resource = self.resource(path)
            assert resource is not None
            return tlv_encode([resource.tlv()])
        if len(ids) == 2:
            return tlv_encode([r.tlv() for r in self.objects[ids[0]][ids[1]].values()])
        return tlv_encode(
            [
                TlvNode(TLV_OBJECT_INSTANCE, iid, b"", [r.tlv() for r in inst.values()])
                for iid, inst in self.objects[ids[0]].items()
            ]
        )

    def read_cbor(self, path: str, content_format: int) -> bytes:
        """A read answered in LwM2M CBOR (nested maps) or SenML CBOR (`bn` = the path read)."""
        ids = _ids(path) or []
        entries: list[tuple[list[int], Value]] = []
        for oid, instances in self.objects.items():
            for iid, resources in instances.items():
                for rid, resource in resources.items():
                    full = [oid, iid, rid]
                    if full[: len(ids)] == ids:
                        entries.append((full, resource.typed()))
        if content_format == LWM2M_CBOR:
            return lwm2m_cbor_encode(entries)
        names = ["".join(f"/{i}" for i in full[len(ids) :]) for full, _ in entries]
        return senml_cbor_encode([(name, value) for name, (_, value) in zip(names, entries, strict=True)], path)

    def decode_cbor_write(self, path: str, content_format: int, payload: bytes) -> dict[str, Value]:
        """Values a CBOR write to a resource or instance carries, by path; BadValue when malformed."""
        try:
            if content_format == LWM2M_CBOR:
                pairs = [("/" + "/".join(map(str, ids)), v) for ids, v in lwm2m_cbor_decode(payload)]
            else:
                pairs = [(n if n.startswith("/") else f"{path}/{n}", v) for n, v in senml_cbor_decode(payload)]
        except CborError as error:
            raise BadValue(str(error)) from error
        values: dict[str, Value] = {}
        for target, value in pairs:
            target = "/" + "/".join(p for p in target.split("/") if p)
            if target != path and not target.startswith(path + "/"):
                raise BadValue(f"{target} written to {path}")
            resource = self.resource(target)
            if resource is None:
                raise KeyError(target)
            values[target] = resource.parse_typed(value)
        return values

    def decode_tlv_write(self, path: str, payload: bytes) -> dict[str, Value]:
        """Values a TLV write to a resource or instance carries, by path; BadValue when not writable data."""
        ids = _ids(path) or []
        try:
            nodes = tlv_decode(payload)
        except TlvError as error:
            raise BadValue(str(error)) from error
        if len(ids) == 2 and len(nodes) == 1 and nodes[0].kind == TLV_OBJECT_INSTANCE:
            nodes = nodes[0].children
        base = f"/{ids[0]}/{ids[1]}"
        values: dict[str, Value] = {}
        for node in nodes:
            if node.kind != TLV_RESOURCE:
                raise BadValue("only single resources can be written here")
            target = f"{base}/{node.id}"
            if len(ids) == 3 and target != path:
                raise BadValue(f"TLV for resource {node.id} written to {path}")
            resource = self.resource(target)
            if resource is None:
                raise KeyError(target)
            values[target] = resource.parse_tlv_value(node.value)
        return values

    def paths(self) -> list[str]:
        return [f"/{o}/{i}/{r}" for o, insts in self.objects.items() for i, res in insts.items() for r in res]

    def instances(self) -> list[str]:
        return [f"/{o}/{i}" for o, insts in self.objects.items() for i in insts]


def _ids(path: str) -> list[int] | None:
    parts = [p for p in path.split("/") if p]
    if not parts or not all(p.isdigit() and len(p) <= 5 for p in parts):
        return None
    return [int(p) for p in parts]


def standard_model(endpoint_name: str, lifetime: int, now: Callable[[], float]) -> Model:
    """The objects every simulated device has (issue 8 §5), typed by the registry's definitions."""
    return Model(
        objects={
            1: {
                0: {
                    0: defined(1, 0, 1),  # Short Server ID
                    1: defined(1, 1, lifetime),  # Lifetime
                    7: defined(1, 7, "U"),  # Binding
                    8: defined(1, 8, ""),  # Registration Update Trigger
                }
            },
            3: {
                0: {
                    0: defined(3, 0, "devicehub", published=True),  # Manufacturer (read-only)
                    1: defined(3, 1, "simulator", published=True),  # Model Number
                    2: defined(3, 2, endpoint_name, published=True),  # Serial Number
                    3: defined(3, 3, "1.0", published=True),  # Firmware Version
                    4: defined(3, 4, ""),  # Reboot
                    9: defined(3, 9, 100),  # Battery Level (auto-observed in the Pelion flavour)
                    13: CurrentTime(13, now),  # Current Time
                    16: defined(3, 16, "U"),  # Supported Binding and Modes
                }
            },
            3303: {
                0: {
                    5700: defined(3303, 5700, 21.5),  # Sensor Value
                    5701: defined(3303, 5701, "Cel"),  # Sensor Units
                    5601: defined(3303, 5601, 21.5),  # Min Measured Value
                    5602: defined(3303, 5602, 21.5),  # Max Measured Value
                }
            },
            3311: {
                0: {
                    5850: defined(3311, 5850, False),  # On/Off
                    5851: defined(3311, 5851, 0),  # Dimmer 0-100
                    5706: defined(3311, 5706, "#FFFFFF"),  # Colour
                }
            },
        }
    )
