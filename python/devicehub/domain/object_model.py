"""The LwM2M object model: what an object definition (DDF, OMA-TS-LightweightM2M_Core §7.1 and Appendix D) says
about each resource — its name, operations, data type, units — and the checks the API makes with it."""

from __future__ import annotations

import math

import msgspec

# Core §7.1 and Appendix C: the data types a resource may have ("" for an executable resource, which has none)
TYPES = ("string", "integer", "unsigned integer", "float", "boolean", "opaque", "time", "objlnk", "corelnk", "")
OPERATIONS = ("", "R", "W", "RW", "E")
NUMERIC = frozenset({"integer", "unsigned integer", "float", "time"})


class ResourceDefinition(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    name: str
    operations: str  # "", "R", "W", "RW" or "E" (Appendix D: a resource is readable/writable or executable)
    type: str  # one of TYPES, lower-case
    multiple: bool = False
    mandatory: bool = False
    units: str = ""
    range: str = ""
    description: str = ""

    @property
    def readable(self) -> bool:
        return "R" in self.operations

    @property
    def writable(self) -> bool:
        return "W" in self.operations

    @property
    def executable(self) -> bool:
        return self.operations == "E"


class ObjectDefinition(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    name: str
    version: str = "1.0"
    multiple: bool = False
    mandatory: bool = False
    description: str = ""
    resources: tuple[ResourceDefinition, ...] = ()

    def resource(self, resource_id: int) -> ResourceDefinition | None:
        for resource in self.resources:
            if resource.id == resource_id:
                return resource
        return None


class AccountObject(msgspec.Struct, frozen=True, kw_only=True):
    """An object definition an account added (`POST /v3/lwm2m-objects`): its devices are read with it."""

    account_id: str
    definition: ObjectDefinition
    created_at: float


def object_id(path: str) -> int:
    """The object id a path starts with (`/3303/0/5700` → 3303), -1 when it names none."""
    first = path.lstrip("/").split("/", 1)[0]
    return int(first) if first.isdigit() else -1


def value_error(resource: ResourceDefinition, text: str) -> str | None:
    """Why `text` (a plain-text write, Core §7.3.1: the value's text form) is not a value of this resource's type,
    or None when it is one. Opaque and untyped resources take any bytes."""
    kind = resource.type
    if kind in ("integer", "time"):
        try:
            int(text, 10)
        except ValueError:
            return f"{resource.name} ({kind}) takes a whole number, not {text!r}"
        return None
    if kind == "unsigned integer":
        if not text.isdigit():
            return f"{resource.name} (unsigned integer) takes a whole number of 0 or more, not {text!r}"
        return None
    if kind == "float":
        try:
            number = float(text)
        except ValueError:
            return f"{resource.name} (float) takes a number, not {text!r}"
        return None if math.isfinite(number) else f"{resource.name} (float) takes a finite number"
    if kind == "boolean":
        # Core §7.3.1: plain text booleans are "0" and "1"
        return None if text in ("0", "1") else f"{resource.name} (boolean) takes 0 or 1, not {text!r}"
    if kind == "objlnk":
        first, sep, second = text.partition(":")
        if sep and first.isdigit() and second.isdigit() and int(first) <= 65535 and int(second) <= 65535:
            return None
        return f"{resource.name} (objlnk) takes object:instance, not {text!r}"
    return None
