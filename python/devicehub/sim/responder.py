"""The device's answers to the server's requests: Read, Observe, Write, Execute and Write-Attributes.

Against the object model (sim/objects.py), in the content formats of LwM2M 1.1 Core §7: plain text and opaque for
one resource, TLV (and the legacy TLV number) or the CBOR formats for more (lwm2m-device-side.md §5).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.domain.content_formats import LEGACY_TLV, OCTET_STREAM, TEXT, TLV
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.messages import Reply
from devicehub.sim import attributes
from devicehub.sim.objects import (
    CBOR_CFS,
    OPAQUE,
    BadValue,
    Model,
    Value,
)
from devicehub.sim.observers import Observers


@dataclass(slots=True)
class DeviceLog:
    """What the server asked of this device, for tests and the progress line."""

    writes: list[tuple[str, Value]] = field(default_factory=list)
    executes: list[tuple[str, bytes]] = field(default_factory=list)
    attribute_queries: list[tuple[str, list[str]]] = field(default_factory=list)
    observes: list[str] = field(default_factory=list)  # paths of Observe requests (GET Observe 0)
    block_reads: list[tuple[str, int]] = field(default_factory=list)  # (path, Block2 num) of later-block reads


# stores decoded values and answers (the device's hook: Edge Core hands some to their owner first)
ApplyWrite = Callable[[dict[str, Value]], Awaitable[Reply]]
# executes a resource and answers (the device's hook: Edge Core restarts on a Reboot)
Execute = Callable[[str, bytes], Reply]


class Reader:
    """Reads of the object model in a content format: what a Read, an Observe and each notification carry."""

    def __init__(self, model: Model) -> None:
        self.model = model
        # the format answering an instance/object read without Accept (None: TLV; Anjay 1.2 picks a CBOR one)
        self.multi_value_format: int | None = None

    def read(self, path: str, accept: int | None) -> Reply:
        """A Read of `path` in `accept` (None: text for a resource, `multi_value_format` or TLV for more)."""
        if not self.model.exists(path):
            return Reply(codes.NOT_FOUND)
        resource = self.model.resource(path)
        if resource is not None and resource.executable:
            return Reply(codes.METHOD_NOT_ALLOWED)
        cf_option = codes.CONTENT_FORMAT
        if resource is not None and accept in (None, TEXT, OCTET_STREAM):
            if resource.kind == OPAQUE and accept != TEXT:
                return Reply(codes.CONTENT, [(cf_option, coap_encode_uint(OCTET_STREAM))], resource.tlv_value())
            if accept == OCTET_STREAM:
                return Reply(codes.NOT_ACCEPTABLE)
            return Reply(codes.CONTENT, [(cf_option, coap_encode_uint(TEXT))], resource.text())
        if accept is None and resource is None:
            accept = self.multi_value_format
        if accept in CBOR_CFS:
            assert accept is not None
            return Reply(codes.CONTENT, [(cf_option, coap_encode_uint(accept))], self.model.read_cbor(path, accept))
        if accept not in (None, TLV, LEGACY_TLV):
            return Reply(codes.NOT_ACCEPTABLE)
        return Reply(codes.CONTENT, [(cf_option, coap_encode_uint(TLV))], self.model.read_tlv(path))


class Responder:
    """Answers the server's requests against `reader`'s model; observations go to `observers`."""

    def __init__(self, reader: Reader, observers: Observers, log: DeviceLog) -> None:
        self.model = reader.model
        self.read = reader.read
        self.observers = observers
        self.log = log

    async def answer(self, message: CoapMessage, payload: bytes, apply_write: ApplyWrite, execute: Execute) -> Reply:
        """The answer to one request from the LwM2M server (not the bootstrap server)."""
        path = message.uri_path
        if path.strip("/").split("/")[0] == "0":
            return Reply(codes.UNAUTHORIZED)  # the Security object is for the bootstrap server only
        code = message.code
        if code == codes.GET:
            if message.observe == 0:
                self.log.observes.append(path)
                return self.observers.observe(message.token, path, message.accept)
            block2 = message.block2
            if block2 is not None and block2[0] > 0:
                self.log.block_reads.append((path, block2[0]))
            if message.observe == 1:
                self.observers.cancel(message.token)
            return self.read(path, message.accept)
        if code == codes.PUT:
            if not payload and message.uri_query:
                return self.write_attributes(path, message.uri_query)
            return await self._write(path, message.content_format, payload, apply_write)
        if code == codes.POST:
            if self.model.resource(path) is not None:
                return execute(path, payload)
            return await self._write(path, message.content_format, payload, apply_write)
        return Reply(codes.METHOD_NOT_ALLOWED)

    async def _write(self, path: str, content_format: int | None, payload: bytes, apply_write: ApplyWrite) -> Reply:
        values = self._decode_write(path, content_format, payload)
        if isinstance(values, Reply):
            return values
        return await apply_write(values)

    def _decode_write(self, path: str, content_format: int | None, payload: bytes) -> dict[str, Value] | Reply:
        """What a write to `path` carries, by resource path; a Reply when it cannot be written."""
        if not self.model.exists(path):
            return Reply(codes.NOT_FOUND)
        try:
            if content_format in (TLV, LEGACY_TLV):
                return self.model.decode_tlv_write(path, payload)
            if content_format in CBOR_CFS:
                assert content_format is not None
                return self.model.decode_cbor_write(path, content_format, payload)
            resource = self.model.resource(path)
            if resource is None:
                return Reply(codes.BAD_REQUEST, payload=b"instance writes need TLV")
            if content_format == OCTET_STREAM:
                return {path: payload} if resource.kind == OPAQUE else Reply(codes.UNSUPPORTED_FORMAT)
            if content_format in (None, TEXT):
                return {path: resource.parse_text(payload)}
            return Reply(codes.UNSUPPORTED_FORMAT)
        except KeyError:
            return Reply(codes.NOT_FOUND)
        except BadValue as error:
            return Reply(codes.BAD_REQUEST, payload=str(error).encode()[:100])

    def store(self, values: dict[str, Value], on_write: Callable[[str, Value], None] | None = None) -> Reply:
        """Store decoded values, all or none (nothing is written when any target is read-only); observers of them
        are told. `on_write` sees each value stored."""
        resources = []
        for target in values:
            resource = self.model.resource(target)
            assert resource is not None
            if not resource.writable:
                return Reply(codes.METHOD_NOT_ALLOWED)
            resources.append((target, resource))
        for target, resource in resources:
            resource.value = values[target]
            self.log.writes.append((target, values[target]))
            if on_write is not None:
                on_write(target, values[target])
            self.observers.changed(target)
        return Reply(codes.CHANGED)

    def write_attributes(self, path: str, query: list[str]) -> Reply:
        if not self.model.exists(path):
            return Reply(codes.NOT_FOUND)
        try:
            self.observers.write_attributes(path, query)
        except attributes.BadAttribute as error:
            return Reply(codes.BAD_REQUEST, payload=str(error).encode()[:100])
        self.log.attribute_queries.append((path, list(query)))
        return Reply(codes.CHANGED)

    def execute(self, path: str, payload: bytes, on_execute: Callable[[str, bytes], None] | None = None) -> Reply:
        """Execute the resource at `path` (it exists); `on_execute` sees each execution."""
        resource = self.model.resource(path)
        assert resource is not None
        if not resource.executable:
            return Reply(codes.METHOD_NOT_ALLOWED)
        self.log.executes.append((path, payload))
        if on_execute is not None:
            on_execute(path, payload)
        return Reply(codes.CHANGED)
