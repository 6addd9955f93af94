"""Resources whose writes and executes a local client decides (a protocol translator for a child device, the
gateway resource manager for Edge Core's own resources): the LwM2M answer to the service waits for that client's
JSON-RPC answer, and a written value is stored only when the client accepted it (mbed-edge `edge_client.cpp`:
`edgeclient_write_success` / `edgeclient_write_failure`, `map_to_coap_error`)."""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from devicehub._core import CoapMessage
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.sim.device import SimDevice
from devicehub.sim.objects import (
    BOOL,
    FLOAT,
    INT,
    OPAQUE,
    STRING,
    TIME,
    Model,
    Resource,
    Value,
)

READ, WRITE, EXECUTE = 1, 2, 4
GATEWAY_TIMEOUT = 0xA4  # CoAP 5.04

# mbed-edge include/common/pt_api_error_codes.h
INTERNAL_ERROR = -30000
NOT_REGISTERED = -30001
ALREADY_REGISTERED = -30002
NAME_RESERVED = -30003
ENDPOINT_LIMIT = -30004
ENDPOINT_ALREADY_REGISTERED = -30005
SHUTTING_DOWN = -30006
REQUEST_TIMEOUT = -30007
REMOTE_DISCONNECTED = -30008
ILLEGAL_VALUE = -30101
RESOURCE_NOT_FOUND = -30102
INVALID_JSON_STRUCTURE = -30103
RESOURCE_NOT_READABLE = -30104
RESOURCE_NOT_WRITABLE = -30105
WRITE_TO_TRANSLATOR_FAILED = -30106
GRM_NOT_REGISTERED = -30200
GRM_ALREADY_REGISTERED = -30201
GRM_NAME_RESERVED = -30202
GRM_OBJECT_RESERVED = -30250
GRM_RESOURCE_EXISTS = -30251
INVALID_PARAMS = -32602

MESSAGES = {  # mbed-edge common/pt_api_error_codes.c
    INTERNAL_ERROR: "Protocol translator API internal error.",
    NOT_REGISTERED: "Protocol translator not registered.",
    ALREADY_REGISTERED: "Protocol translator already registered.",
    NAME_RESERVED: "Protocol translator name reserved.",
    ENDPOINT_LIMIT: "The maximum number of registered endpoints is already in use.",
    ENDPOINT_ALREADY_REGISTERED: "Cannot register endpoint, because it's already registered.",
    SHUTTING_DOWN: "Edge Core is shutting down.",
    REQUEST_TIMEOUT: "Request timeout.",
    REMOTE_DISCONNECTED: "Remote disconnected.",
    ILLEGAL_VALUE: "Illegal value.",
    RESOURCE_NOT_FOUND: "Resource not found.",
    INVALID_JSON_STRUCTURE: "Invalid json structure.",
    RESOURCE_NOT_READABLE: "Resource not readable.",
    RESOURCE_NOT_WRITABLE: "Resource not writable.",
    WRITE_TO_TRANSLATOR_FAILED: "Write request to protocol translator failed.",
    GRM_NOT_REGISTERED: "Gateway resource manager not registered.",
    GRM_ALREADY_REGISTERED: "Gateway resource manager already registered.",
    GRM_NAME_RESERVED: "Gateway resource manager name reserved.",
    GRM_OBJECT_RESERVED: "Object id reserved.",
    GRM_RESOURCE_EXISTS: "Gateway resource already exists.",
    INVALID_PARAMS: "Invalid params",
    -32600: "Invalid Request",
    -32601: "Method not found",
    -32700: "Parse error",
}


class RpcError(Exception):
    """A JSON-RPC error: one Edge Core answers with, or one a translator answered Edge Core's request with.
    `message` is the code's standard text (mbed-edge), `data` the detail."""

    def __init__(self, code: int, data: str = "", message: str | None = None) -> None:
        super().__init__(data or MESSAGES.get(code, "error"))
        self.code = code
        self.message = message if message is not None else MESSAGES.get(code, "Unknown error code.")
        self.data = data

    def body(self) -> dict[str, object]:
        error: dict[str, object] = {"code": self.code, "message": self.message}
        if self.data:
            error["data"] = self.data
        return error


TYPES = {"string": STRING, "int": INT, "float": FLOAT, "bool": BOOL, "time": TIME, "objlink": STRING, "opaque": OPAQUE}


@dataclass(slots=True)
class Objects:
    """The resources a `device_register`/`add_resource` call declares."""

    model: Model
    kinds: dict[str, str] = field(default_factory=dict)  # path → value kind
    operations: dict[str, int] = field(default_factory=dict)  # path → READ|WRITE|EXECUTE bitmask as declared
    types: dict[str, str] = field(default_factory=dict)  # path → the type name as declared ("objlink", …)


def build_model(objects: object, *, code: int = INVALID_PARAMS) -> Objects:
    """The LwM2M model of a call's `objects`; RpcError `code` when malformed."""
    if not isinstance(objects, list) or not objects:
        raise RpcError(code, "objects must be a non-empty list")
    built = Objects(Model())
    try:
        for obj in objects:
            oid = int(obj["objectId"])
            for instance in obj["objectInstances"]:
                iid = int(instance["objectInstanceId"])
                resources = built.model.objects.setdefault(oid, {}).setdefault(iid, {})
                for res in instance["resources"]:
                    type_name = res.get("type", "string")
                    rid, kind = int(res["resourceId"]), TYPES[type_name]
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
                    path = f"/{oid}/{iid}/{rid}"
                    built.kinds[path], built.operations[path], built.types[path] = kind, operations, type_name
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise RpcError(code, f"malformed objects: {error!r}") from error
    if not all(0 <= int(p) <= 65535 for path in built.kinds for p in path.strip("/").split("/")):
        raise RpcError(code, "object, instance and resource ids are 0-65535")
    return built


# (path, operation, base64 value) → None once the client answered `ok`; RpcError otherwise
Forward = Callable[[str, int, str], Awaitable[None]]


def coap_code(error: RpcError) -> int:
    """The CoAP answer to the service for a failed forward (mbed-edge `map_to_coap_error`)."""
    if error.code == REQUEST_TIMEOUT:
        return GATEWAY_TIMEOUT
    if error.code == REMOTE_DISCONNECTED:
        return codes.NOT_FOUND
    return codes.INTERNAL_ERROR


def decode_value(kind: str, data: str) -> Value:
    """A translator's base64 value in the type's binary form (Mbed Edge): big-endian numbers."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise RpcError(ILLEGAL_VALUE, f"value is not base64: {error}") from error
    try:
        if kind in (INT, TIME):
            if len(raw) not in (0, 1, 2, 4, 8):
                raise RpcError(ILLEGAL_VALUE, f"an integer is 1, 2, 4 or 8 bytes, not {len(raw)}")
            return int.from_bytes(raw, "big", signed=True) if raw else 0
        if kind == FLOAT:
            return struct.unpack(">d" if len(raw) == 8 else ">f", raw)[0] if raw else 0.0
        if kind == BOOL:
            if len(raw) > 1:
                raise RpcError(ILLEGAL_VALUE, "a boolean is one byte")
            return raw not in (b"", b"\x00")
        if kind == OPAQUE:
            return raw
        return raw.decode()
    except (struct.error, UnicodeDecodeError) as error:
        raise RpcError(ILLEGAL_VALUE, f"illegal value for a {kind} resource: {error}") from error


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
class Forwarded:
    kind: str
    operations: int
    forward: Forward
    owner: object = None  # the connection that added it (a gateway resource manager), for removal with it


class ForwardingDevice(SimDevice):
    """A simulated LwM2M client some of whose resources belong to a local JSON-RPC client (`forwarded`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.forwarded: dict[str, Forwarded] = {}

    async def _handle(self, message: CoapMessage, payload: bytes, remote: Address) -> Reply | None:
        if message.code == codes.POST and message.uri_path in self.forwarded:
            self.counters.requests += 1
            return await self._forward_execute(message.uri_path, payload)
        return await super()._handle(message, payload, remote)

    async def _apply_write(self, values: dict[str, Value]) -> Reply:
        """A write that touches a forwarded resource waits for its owner's answer; any other is stored here."""
        if any(target in self.forwarded for target in values):
            return await self._forward_write(values)
        return await super()._apply_write(values)

    async def _forward_write(self, values: dict[str, Value]) -> Reply:
        for target in values:
            resource = self.model.resource(target)
            if resource is None or not resource.writable:
                return Reply(codes.METHOD_NOT_ALLOWED)  # nothing is written when any target is read-only
        for target, value in values.items():
            owner = self.forwarded.get(target)
            if owner is not None:
                try:
                    await owner.forward(target, WRITE, encode_value(owner.kind, value))
                except RpcError as error:
                    return Reply(coap_code(error))  # mbed-edge answers the code alone
            self.log.writes.append((target, value))
            self.set_value(target, value)  # stored (and observers notified) only once the owner said ok
        return Reply(codes.CHANGED)

    async def _forward_execute(self, path: str, payload: bytes) -> Reply:
        resource, owner = self.model.resource(path), self.forwarded[path]
        if resource is None or not resource.executable:
            return Reply(codes.METHOD_NOT_ALLOWED)
        try:
            await owner.forward(path, EXECUTE, base64.b64encode(payload).decode())
        except RpcError as error:
            return Reply(coap_code(error))  # mbed-edge answers the code alone
        self.log.executes.append((path, payload))
        return Reply(codes.CHANGED)
