"""The simulated device's bootstrap client (LwM2M 1.1 Core §5.2, §6.1; Transport §5.2), as Wakaama core/bootstrap.c.

It sends `POST /bs?ep=NAME&pct=11542`, then answers the bootstrap server: Bootstrap-Discover (GET, Accept
link-format: `</>;lwm2m=1.1,</0/0>,</0/1>;ssid=1;uri="…",</1/0>;ssid=1,…`), Bootstrap-Read of /1, Bootstrap-Delete
(`/`, `/0`, `/1` or one of their instances; the bootstrap account is kept), Bootstrap-Write in TLV (new instances are
created) and Bootstrap-Finish (`POST /bs`: 2.04 when a Security instance and a Server instance with the same short
server id exist, else 4.06 Not Acceptable as Wakaama). Written values stay in the device's object tree. Only
objects 0 and 1 are created or deleted by bootstrap: the simulated sensors are the device's own. Requests from the
bootstrap server outside a session get 4.01.
Over `coaps://` (issue 28 #6) the client bootstraps in a DTLS session of its own with its credentials (`--psk-key`,
`--psk-identity` or `--cert`/`--key`), and registers as the written Security instance says: security mode PSK with
the written identity (resource 3) and key (resource 5), NoSec over plain CoAP; certificate mode with the
certificate it bootstrapped with (the simulator does not install written private keys).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

from devicehub._core import TLV_OBJECT_INSTANCE, TLV_RESOURCE, CoapMessage, TlvError, TlvNode, coap_encode_uint
from devicehub._core import tlv_decode as _tlv_decode
from devicehub.clock import Clock
from devicehub.domain.content_formats import LEGACY_TLV, LINK_FORMAT, TLV
from devicehub.domain.device_results import DeviceError
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.coap.parameters import MAX_TRANSMIT_WAIT
from devicehub.lwm2m.links import quoted_string
from devicehub.lwm2m.security import ClientCredentials
from devicehub.sim.objects import (
    BOOL,
    INT,
    OPAQUE,
    STRING,
    BadValue,
    Model,
    Resource,
)

PSK, CERTIFICATE, NO_SEC = 0, 2, 3  # Security object resource 2 (LwM2M 1.1 Core Appendix E.1)
# resource kinds of the Security (0) and Server (1) objects (LwM2M 1.1 Core Appendix E.1, E.2); others are opaque
SECURITY_KINDS = {0: STRING, 1: BOOL, 2: INT, 6: INT, 9: STRING, 10: INT, 11: INT, 12: INT, 13: INT, 14: STRING}
SERVER_KINDS = {0: INT, 1: INT, 2: INT, 3: INT, 5: INT, 6: BOOL, 7: STRING, 13: INT, 14: INT, 15: BOOL, 16: BOOL}
KINDS = {0: SECURITY_KINDS, 1: SERVER_KINDS}
REGISTRATION_UPDATE_TRIGGER = 8
FINISH_WAIT = 2 * MAX_TRANSMIT_WAIT  # Wakaama waits EXCHANGE_LIFETIME for the server's requests; about the same


class BootstrapError(DeviceError):
    """Bootstrap did not end with a usable LwM2M server account."""


@dataclass(frozen=True, slots=True)
class Provisioned:
    """What Bootstrap-Finish left in /0 and /1: where and how to register."""

    server_uri: str
    server: Address
    short_server_id: int
    lifetime: int
    binding: str
    security: ClientCredentials | None = None  # None: NoSec (plain CoAP)


def coap_address(uri: str) -> Address:
    """`coap://host:port` or `coaps://host:port` → (host, port), default port 5683 or 5684."""
    parts = urlsplit(uri)
    port = parts.port  # ValueError for a port that is not a number in 0…65535
    if parts.scheme not in ("coap", "coaps") or not parts.hostname:
        raise ValueError(f"expected coap://host:port or coaps://host:port, not {uri!r}")
    return parts.hostname, port or (5684 if parts.scheme == "coaps" else 5683)


def _ids(path: str) -> list[int] | None:
    parts = [p for p in path.split("/") if p]
    if not all(p.isdigit() and len(p) <= 5 and int(p) <= 65535 for p in parts) or len(parts) > 3:
        return None
    return [int(p) for p in parts]


class BootstrapClient:
    """One device's client side of the bootstrap interface (see the module docstring)."""

    def __init__(
        self,
        model: Model,
        clock: Clock,
        endpoint_name: str,
        bootstrap_uri: str,
        credentials: ClientCredentials | None = None,
    ) -> None:
        self.model = model
        self.clock = clock
        self.endpoint_name = endpoint_name
        self.server = coap_address(bootstrap_uri)
        self.credentials = credentials  # for a coaps:// bootstrap server: the device's bootstrap credentials
        if bootstrap_uri.startswith("coaps:") != (credentials is not None):
            raise ValueError("a coaps:// bootstrap server needs credentials, a coap:// one none")
        self.pending = False
        self.requests: list[tuple[str, str]] = []  # (method, path) the bootstrap server sent, in order
        self._finished: asyncio.Future[None] | None = None
        self.account = 0  # the Security instance of the bootstrap account (it has no short server id)
        model.objects.setdefault(0, {})[self.account] = {
            0: Resource(0, STRING, bootstrap_uri),
            1: Resource(1, BOOL, True),
            2: Resource(2, INT, NO_SEC if credentials is None else PSK if credentials.psk_identity else CERTIFICATE),
            3: Resource(3, OPAQUE, b""),
            4: Resource(4, OPAQUE, b""),
            5: Resource(5, OPAQUE, b""),
        }

    # ---- the client's side of the exchange ----------------------------------------------------------
    async def run(self, endpoint: CoapEndpoint) -> Provisioned:
        """Bootstrap-Request, then wait for Bootstrap-Finish; BootstrapError when it does not come to a use."""
        loop = asyncio.get_running_loop()
        self._finished = loop.create_future()
        self.pending = True
        try:
            options = [
                (codes.URI_PATH, b"bs"),
                (codes.URI_QUERY, f"ep={self.endpoint_name}".encode()),
                (codes.URI_QUERY, f"pct={TLV}".encode()),
            ]
            response = await endpoint.request(self.server, codes.POST, options)
            if response.code != codes.CHANGED:
                raise BootstrapError(f"Bootstrap-Request answered {codes.dotted(response.code)}")
            timer = asyncio.ensure_future(self.clock.sleep(FINISH_WAIT))
            try:
                await asyncio.wait((timer, self._finished), return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            if not self._finished.done():
                raise BootstrapError("no Bootstrap-Finish from the bootstrap server")
        finally:
            self.pending = False
        provisioned = self.provisioned()
        if provisioned is None:  # pragma: no cover - Finish is only accepted when consistent
            raise BootstrapError("no LwM2M server account after Bootstrap-Finish")
        return provisioned

    def provisioned(self) -> Provisioned | None:
        """The first Security instance (not the bootstrap account) with a Server instance of the same short id."""
        servers = {int(inst[0].value): inst for inst in self.model.objects.get(1, {}).values() if 0 in inst}
        for iid, security in sorted(self.model.objects.get(0, {}).items()):
            if iid == self.account or 0 not in security or 10 not in security:
                continue
            server = servers.get(int(security[10].value))
            if server is None:
                continue
            uri = str(security[0].value)
            credentials = self._credentials(security)
            try:
                address = coap_address(uri)
            except ValueError:
                address = ("", 0)  # unusable: the device cannot register there (reported by the caller)
            if uri.startswith("coaps:") == (credentials is None):
                address = ("", 0)  # a mode the simulator cannot take up, or one that does not fit the scheme
            lifetime = int(server[1].value) if 1 in server else 86_400
            binding = str(server[7].value) if 7 in server else "U"
            return Provisioned(uri, address, int(security[10].value), lifetime, binding, credentials)
        return None

    def _credentials(self, security: dict[int, Resource]) -> ClientCredentials | None:
        """The credentials a written Security instance gives for registering: None for NoSec (or a mode the
        simulator does not take up, which `provisioned` then reports as unusable)."""
        mode = int(security[2].value) if 2 in security else NO_SEC
        if mode == PSK and 3 in security and 5 in security:
            identity, key = security[3].value, security[5].value
            if isinstance(identity, bytes) and isinstance(key, bytes) and identity and key:
                return ClientCredentials(psk_identity=identity.decode(errors="replace"), psk_key=key)
        if mode == CERTIFICATE and self.credentials is not None and self.credentials.cert_file:
            return self.credentials
        return None

    # ---- requests of the bootstrap server -----------------------------------------------------------
    async def handle(self, message: CoapMessage, payload: bytes) -> Reply:
        path = "/" + message.uri_path.strip("/")
        method = {codes.GET: "GET", codes.PUT: "PUT", codes.POST: "POST", codes.DELETE: "DELETE"}.get(message.code)
        if not self.pending:
            return Reply(codes.UNAUTHORIZED)
        self.requests.append((method or str(message.code), path))
        if message.code == codes.POST and path == "/bs":
            return self._finish()
        ids = _ids(path)
        if ids is None:
            return Reply(codes.BAD_REQUEST)
        if message.code == codes.GET:
            if message.accept == LINK_FORMAT:
                return self._discover(ids)
            return self._read(path, ids)
        if message.code == codes.DELETE:
            return self._delete(ids)
        if message.code == codes.PUT:
            return self._write(ids, message.content_format, payload)
        return Reply(codes.METHOD_NOT_ALLOWED)

    def _finish(self) -> Reply:
        if self.provisioned() is None:
            return Reply(codes.NOT_ACCEPTABLE)  # Wakaama: no consistent server account
        if self._finished is not None and not self._finished.done():
            self._finished.set_result(None)
        return Reply(codes.CHANGED)

    def _discover(self, ids: list[int]) -> Reply:
        if len(ids) > 1:
            return Reply(codes.BAD_REQUEST)
        links = ["</>;lwm2m=1.1"]
        for oid, instances in sorted(self.model.objects.items()):
            if ids and oid != ids[0]:
                continue
            if not instances:
                links.append(f"</{oid}>")
            for iid, resources in sorted(instances.items()):
                link = f"</{oid}/{iid}>"
                if oid == 0 and iid != self.account and 10 in resources:
                    link += f";ssid={resources[10].text().decode()}"
                    if 0 in resources:
                        link += f";uri={quoted_string(resources[0].text().decode())}"
                elif oid == 1 and 0 in resources:
                    link += f";ssid={resources[0].text().decode()}"
                links.append(link)
        if ids and ids[0] not in self.model.objects:
            return Reply(codes.NOT_FOUND)
        return Reply(codes.CONTENT, [(codes.CONTENT_FORMAT, coap_encode_uint(LINK_FORMAT))], ",".join(links).encode())

    def _read(self, path: str, ids: list[int]) -> Reply:
        if not ids or ids[0] != 1:  # Bootstrap-Read: the Server object (and ACLs, which the simulator has not)
            return Reply(codes.BAD_REQUEST)
        if not self.model.exists(path):
            return Reply(codes.NOT_FOUND)
        return Reply(codes.CONTENT, [(codes.CONTENT_FORMAT, coap_encode_uint(TLV))], self.model.read_tlv(path))

    def _delete(self, ids: list[int]) -> Reply:
        if len(ids) > 2 or (ids and ids[0] not in KINDS):
            return Reply(codes.BAD_REQUEST)
        if len(ids) == 2:
            if ids[0] == 0 and ids[1] == self.account:
                return Reply(codes.BAD_REQUEST)  # the bootstrap account stays
            if self.model.objects.get(ids[0], {}).pop(ids[1], None) is None:
                return Reply(codes.NOT_FOUND)
            return Reply(codes.DELETED)
        for oid in ids[:1] or list(KINDS):
            instances = self.model.objects.setdefault(oid, {})
            for iid in list(instances):
                if not (oid == 0 and iid == self.account):
                    del instances[iid]
        return Reply(codes.DELETED)

    def _write(self, ids: list[int], content_format: int | None, payload: bytes) -> Reply:
        if not ids:
            return Reply(codes.BAD_REQUEST)
        if content_format not in (TLV, LEGACY_TLV):
            return Reply(codes.UNSUPPORTED_FORMAT)
        oid = ids[0]
        if oid not in KINDS:
            return self._write_existing(ids, payload)
        try:
            nodes = _tlv_decode(payload)
            if len(ids) == 1:
                instances = [(n.id, n.children) for n in nodes if n.kind == TLV_OBJECT_INSTANCE]
                if len(instances) != len(nodes):
                    return Reply(codes.BAD_REQUEST)
            elif len(ids) == 2:
                if len(nodes) == 1 and nodes[0].kind == TLV_OBJECT_INSTANCE:
                    if nodes[0].id != ids[1]:
                        return Reply(codes.BAD_REQUEST)
                    nodes = nodes[0].children
                instances = [(ids[1], nodes)]
            else:
                if len(nodes) != 1 or nodes[0].id != ids[2]:
                    return Reply(codes.BAD_REQUEST)
                instances = [(ids[1], nodes)]
            decoded = [(iid, self._resources(oid, children)) for iid, children in instances]
        except (TlvError, BadValue):
            return Reply(codes.BAD_REQUEST)
        for iid, _ in decoded:
            if oid == 0 and iid == self.account:
                return Reply(codes.BAD_REQUEST)  # the bootstrap account is not overwritten
        objects = self.model.objects.setdefault(oid, {})
        for iid, resources in decoded:
            instance = objects.setdefault(iid, {})
            if oid == 1:
                instance.setdefault(REGISTRATION_UPDATE_TRIGGER, Resource(8, STRING, "", executable=True))
            instance.update(resources)
        return Reply(codes.CHANGED)

    @staticmethod
    def _resources(oid: int, nodes: list[TlvNode]) -> dict[int, Resource]:
        kinds = KINDS[oid]
        resources: dict[int, Resource] = {}
        for node in nodes:
            if node.kind != TLV_RESOURCE:
                continue  # multiple resources (e.g. /0/x/16 cipher suites) are not kept by the simulator
            resource = Resource(node.id, kinds.get(node.id, OPAQUE), b"", writable=oid == 1)
            resource.value = resource.parse_tlv_value(node.value)
            resources[node.id] = resource
        return resources

    def _write_existing(self, ids: list[int], payload: bytes) -> Reply:
        """Bootstrap-Write of another object's existing instance (e.g. /3/0/13)."""
        path = "/" + "/".join(str(i) for i in ids)
        if len(ids) < 2 or not self.model.exists(path):
            return Reply(codes.NOT_FOUND)
        try:
            values = self.model.decode_tlv_write(path, payload)
        except KeyError:
            return Reply(codes.NOT_FOUND)
        except BadValue:
            return Reply(codes.BAD_REQUEST)
        for target, value in values.items():
            resource = self.model.resource(target)
            assert resource is not None
            resource.value = value
        return Reply(codes.CHANGED)
