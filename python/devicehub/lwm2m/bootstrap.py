"""The LwM2M bootstrap server (LwM2M 1.1 Core §5.2, §6.1; Transport §5.2) on its own CoAP endpoint.

A device sends `POST /bs?ep=NAME[&pct=N]`; with a configuration for NAME it gets 2.04, and once that answer is
on its way the server runs the session, one request at a time, as Leshan's DefaultBootstrapHandler does:
Bootstrap-Discover (`GET /`, Accept link-format) to find the Security instance of the bootstrap account (the /0
instance without `ssid`, as Leshan's BootstrapConfigStoreTaskProvider), Bootstrap-Delete of /0 and /1 (the client
keeps its bootstrap account: Wakaama core/bootstrap.c), Bootstrap-Write of one Security and one Server instance in
TLV, and Bootstrap-Finish (`POST /bs`). Without a configuration the answer is 4.00 "no bootstrap configuration",
Leshan's answer (Wakaama's example server stays silent). A new `POST /bs` of the same endpoint replaces its
session in progress. Values written, in TLV resource order:
/0/x: 0 server URI, 1 bootstrap-server = false, 2 security mode, 3 public key or identity, 4 server public key,
5 secret key, 10 short server id; /1/y: 0 short server id, 1 lifetime, 6 notification storing = false, 7 binding.
Writes are TLV whatever `pct` prefers (checked only for form): Wakaama and Anjay take TLV when the Content-Format
says so. Bootstrap-Read is not needed for this sequence and not sent.
Everything the device answers is untrusted: a failed or odd exchange ends that session, counted, and nothing else.

What a session writes (`/0` with PSKs or private keys) must not cross the network in clear (issue 28 #6), so the
server also listens over DTLS (`start_secure`: the LwM2M server's DTLS listener, lwm2m/dtls.py, with its keyring —
PSK identities of /v2/device-shared-keys and certificate CNs issued by a CA an account trusts, lwm2m/security.py).
Over DTLS a Bootstrap-Request for `ep` is answered only when the DTLS identity's name is `ep` and its account is
the account of `ep`'s configuration — the LwM2M server's Register rule (lwm2m/authorizer.py) — otherwise 4.03, the
same answer whether the configuration is missing or another account's, so it reveals nothing of other accounts
(LwM2M 1.1 Core §6.1, Bootstrap-Request `POST /bs?ep=`; Transport §5.2, DTLS). Each request of the session goes
only to the DTLS session that asked: when that session ends (close_notify, revocation, a new handshake from the
address) the bootstrap session ends with it, and writes nothing more. Plain CoAP is answered only with
`allow_nosec` (`serve --allow-nosec` or `--dev`); otherwise 4.03 "DTLS required", as the LwM2M server answers.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from devicehub._core import TLV_RESOURCE, CoapMessage, TlvNode, coap_encode_uint, tlv_bool, tlv_encode, tlv_int
from devicehub.clock import Clock
from devicehub.domain.content_formats import LINK_FORMAT, TLV
from devicehub.domain.device_results import DeviceError
from devicehub.domain.model import BootstrapConfig
from devicehub.domain.usage import BOOTSTRAPS_PENDING, UsageMeter
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Options, Reply
from devicehub.lwm2m.dtls import DtlsListener
from devicehub.lwm2m.links import LinkFormatError, ascii_digits, link_attributes
from devicehub.lwm2m.query import MAX_ENDPOINT_NAME, endpoint_name_in, parse_query
from devicehub.lwm2m.security import PeerIdentity
from devicehub.lwm2m.udp import open_udp

log = logging.getLogger("devicehub.bootstrap")

NO_SEC = 3  # Security object resource 2
MAX_SESSIONS = 1024
OUTCOMES_KEPT = 1024
FALLBACK_SECURITY_INSTANCE = 1  # a client that cannot Discover (LwM2M 1.0): its bootstrap account is taken as /0/0

Lookup = Callable[[str, Address], Awaitable[BootstrapConfig | None]]
IdentityOf = Callable[[Address], PeerIdentity | None]
NOT_YOURS = b"no bootstrap configuration for this identity"


class BootstrapFailed(Exception):
    """A step of a bootstrap session was refused or not answered."""


@dataclass(slots=True)
class BootstrapStats:
    requests: int = 0
    refused: int = 0  # no configuration (plain CoAP)
    forbidden: int = 0  # plain CoAP without allow_nosec, or a DTLS identity that is not the endpoint's (4.03)
    malformed: int = 0
    busy: int = 0
    completed: int = 0
    failed: int = 0
    superseded: int = 0


def security_instance(config: BootstrapConfig) -> bytes:
    """TLV resources of the Security instance (object 0) for the configured server."""
    return tlv_encode(
        [
            TlvNode(TLV_RESOURCE, 0, config.server_uri.encode()),
            TlvNode(TLV_RESOURCE, 1, tlv_bool(False)),
            TlvNode(TLV_RESOURCE, 2, tlv_int(config.security_mode)),
            TlvNode(TLV_RESOURCE, 3, config.public_identity),
            TlvNode(TLV_RESOURCE, 4, config.server_public_key),
            TlvNode(TLV_RESOURCE, 5, config.secret_key),
            TlvNode(TLV_RESOURCE, 10, tlv_int(config.short_server_id)),
        ]
    )


def server_instance(config: BootstrapConfig) -> bytes:
    """TLV resources of the Server instance (object 1)."""
    return tlv_encode(
        [
            TlvNode(TLV_RESOURCE, 0, tlv_int(config.short_server_id)),
            TlvNode(TLV_RESOURCE, 1, tlv_int(config.lifetime)),
            TlvNode(TLV_RESOURCE, 6, tlv_bool(False)),
            TlvNode(TLV_RESOURCE, 7, config.binding.encode()),
        ]
    )


def bootstrap_account_instance(discover_payload: bytes) -> int | None:
    """The /0 instance that has no `ssid` in a Bootstrap-Discover answer (the bootstrap server's own account)."""
    for target, attrs in link_attributes(discover_payload):
        parts = target.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "0" and ascii_digits(parts[1], 5) and "ssid" not in attrs:
            return int(parts[1])
    return None


def local_address_towards(remote: Address) -> str:
    """The address of this host on the route to `remote` (no packet is sent: a UDP connect only picks a route)."""
    family = socket.AF_INET6 if ":" in remote[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(remote)
        return str(probe.getsockname()[0])


class BootstrapConfigs(Protocol):
    """Where the bootstrap configurations are kept: the store implements it."""

    async def get_bootstrap_config(self, endpoint_name: str) -> BootstrapConfig | None: ...


class ConfigLookup:
    """Configurations from the store. With `dev_port` (`serve --dev`), an endpoint without one is sent to this
    service's own LwM2M server on that port with NoSec, as `--dev` admits any device."""

    def __init__(self, store: BootstrapConfigs, clock: Clock, *, host: str, dev_port: int | None = None) -> None:
        self._store = store
        self._clock = clock
        self._host = host
        self._dev_port = dev_port

    async def config_for(self, endpoint_name: str, remote: Address) -> BootstrapConfig | None:
        config = await self._store.get_bootstrap_config(endpoint_name)
        if config is not None or self._dev_port is None:
            return config
        host = self._host if self._host not in ("", "0.0.0.0", "::") else local_address_towards(remote)
        now = self._clock.now()
        return BootstrapConfig(
            endpoint_name=endpoint_name,
            account_id="",
            server_uri=f"coap://[{host}]:{self._dev_port}" if ":" in host else f"coap://{host}:{self._dev_port}",
            security_mode=NO_SEC,
            created_at=now,
            updated_at=now,
        )


@dataclass(frozen=True, slots=True)
class _Channel:
    """A listener of the bootstrap server: its endpoint, and for DTLS who each peer proved to be."""

    endpoint: CoapEndpoint
    identity_of: IdentityOf | None = None  # None: plain CoAP


@dataclass(slots=True)
class _Peer:
    """The device a session talks to: over the channel it asked on, and over DTLS only while the session of the
    identity that asked lasts (`ended`: the listener ended it; a new handshake from that address ends it too)."""

    channel: _Channel
    remote: Address
    identity: PeerIdentity | None
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    async def request(self, code: int, options: Options, payload: bytes = b"") -> CoapMessage:
        identity_of = self.channel.identity_of
        exchange = self.channel.endpoint.request(self.remote, code, options, payload)
        if identity_of is None:
            return await exchange
        if self.ended.is_set() or identity_of(self.remote) != self.identity:
            exchange.close()
            raise BootstrapFailed("the DTLS session that asked has ended")
        answer = asyncio.ensure_future(exchange)
        ended = asyncio.ensure_future(self.ended.wait())
        try:
            await asyncio.wait((answer, ended), return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            if not answer.done():
                answer.cancel()
                await asyncio.gather(answer, return_exceptions=True)
        if answer.cancelled():  # an answer that came before the session ended still counts
            raise BootstrapFailed("the DTLS session that asked has ended")
        return answer.result()


class BootstrapServer:
    """Answers `POST /bs` and runs one bootstrap session per endpoint (see the module docstring)."""

    def __init__(
        self, lookup: Lookup, clock: Clock, *, max_sessions: int = MAX_SESSIONS, allow_nosec: bool = True
    ) -> None:
        self._lookup = lookup
        self._clock = clock
        self._max_sessions = max_sessions
        self._allow_nosec = allow_nosec
        self._endpoint: CoapEndpoint | None = None
        self._dtls: DtlsListener | None = None
        self._sessions: dict[str, asyncio.Task[None]] = {}
        self._peers: dict[str, _Peer] = {}  # whom each session talks to
        self._warned: set[str] = set()
        # endpoint name → "completed" or the reason of failure, newest last (bounded): for operators and tests
        self.outcomes: OrderedDict[str, str] = OrderedDict()
        self.stats = BootstrapStats()
        # issue 32 #3: told of each session's end (completed or not), for its account's records (node.py)
        self.on_ended: Callable[[BootstrapConfig, bool], Awaitable[None]] | None = None
        self.usage: UsageMeter | None = None  # issue 32 #3: bootstraps_pending, counted in the hour a session starts

    async def start(self, host: str, port: int) -> None:
        """The plain CoAP listener (answered only with `allow_nosec`)."""
        channel = self._channel(None)
        # the LwM2M listener's socket (batched reads, RECEIVE_BUFFER): a fleet bootstrapping at once is a storm too
        await open_udp(channel.endpoint, host, port)
        self._endpoint = channel.endpoint

    async def start_secure(self, host: str, port: int, certificate: tuple[bytes, bytes], **options: Any) -> None:
        """The DTLS listener (issue 28 #6), with `DtlsListener`'s options; hand it the keyring with `dtls.load()`."""
        channel = self._channel(lambda remote: None if self._dtls is None else self._dtls.identity(remote))
        self._dtls = await DtlsListener.bind(
            host, port, self._clock, channel.endpoint, certificate=certificate, on_end=self._dtls_ended, **options
        )

    def _channel(self, identity_of: IdentityOf | None) -> _Channel:
        channel: _Channel

        async def handle(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
            return await self._handle(message, payload, remote, channel)

        channel = _Channel(CoapEndpoint(self._clock, handle), identity_of)
        return channel

    async def stop(self) -> None:
        for task in list(self._sessions.values()):
            task.cancel()
        await asyncio.gather(*self._sessions.values(), return_exceptions=True)
        if self._endpoint is not None:
            await self._endpoint.close()
        if self._dtls is not None:
            await self._dtls.close()

    @property
    def address(self) -> Address:
        assert self._endpoint is not None, "start() first"
        return self._endpoint.address

    @property
    def dtls(self) -> DtlsListener | None:
        return self._dtls

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {"bootstrap_sessions": len(self._sessions)}
        for name in BootstrapStats.__slots__:
            values[f"bootstrap_{name}"] = getattr(self.stats, name)
        if self._dtls is not None:
            values["bootstrap_dtls_sessions"] = self._dtls.session_count()
            for name in self._dtls.stats.__slots__:
                values[f"bootstrap_dtls_{name}"] = getattr(self._dtls.stats, name)
        return values

    # ---- Bootstrap-Request --------------------------------------------------------------------------
    async def _handle(self, message: CoapMessage, payload: bytes, remote: Address, channel: _Channel) -> Reply:
        identity: PeerIdentity | None = None
        if channel.identity_of is not None:
            identity = channel.identity_of(remote)
            if identity is None:  # its session ended meanwhile
                return Reply(codes.UNAUTHORIZED)
        elif not self._allow_nosec:
            self.stats.forbidden += 1
            self._warn_once(
                remote[0], "plain CoAP bootstrap from %s refused: it needs DTLS (--allow-nosec accepts it)", remote[0]
            )
            return Reply(codes.FORBIDDEN, payload=b"DTLS required")
        if [s for s in message.uri_path.split("/") if s] != ["bs"]:
            return Reply(codes.NOT_FOUND)
        if message.code != codes.POST:
            return Reply(codes.METHOD_NOT_ALLOWED)
        self.stats.requests += 1
        query = parse_query(message.uri_query)
        endpoint_name = endpoint_name_in(query)
        if endpoint_name is None:
            self.stats.malformed += 1
            reason = f"bootstrap needs ep= (1-{MAX_ENDPOINT_NAME} printable characters)"
            return Reply(codes.BAD_REQUEST, payload=reason.encode())
        pct = query.get("pct")
        if pct is not None and not ascii_digits(pct, 5):
            self.stats.malformed += 1
            return Reply(codes.BAD_REQUEST, payload=b"pct must be a content-format number")
        if identity is not None and identity.name != endpoint_name:  # asked before any lookup: no oracle
            return self._forbid(identity, endpoint_name, remote, "the identity is not the endpoint name")
        config = await self._lookup(endpoint_name, remote)
        if identity is not None and (config is None or config.account_id != identity.account_id):
            why = "no configuration" if config is None else "the configuration is another account's"
            return self._forbid(identity, endpoint_name, remote, why)
        if config is None:
            self.stats.refused += 1
            log.info("bootstrap refused for %r from %s:%d: no configuration", endpoint_name, *remote)
            return Reply(codes.BAD_REQUEST, payload=b"no bootstrap configuration")
        previous = self._sessions.pop(endpoint_name, None)
        if previous is not None:
            previous.cancel()
            self.stats.superseded += 1
        elif len(self._sessions) >= self._max_sessions:
            self.stats.busy += 1
            return Reply(codes.SERVICE_UNAVAILABLE)
        # the task first runs after this handler has returned and the transport has sent the 2.04
        peer = _Peer(channel, remote, identity)
        task = asyncio.create_task(self._session(endpoint_name, config, peer), name=f"bootstrap-{endpoint_name}")
        self._sessions[endpoint_name] = task
        self._peers[endpoint_name] = peer
        task.add_done_callback(lambda done: self._ended(endpoint_name, done))
        if self.usage is not None and config.account_id:  # pending from now until the session ends, however
            usage, account_id, started = self.usage, config.account_id, self._clock.now()
            usage.count_at(account_id, started, BOOTSTRAPS_PENDING, 1)
            task.add_done_callback(lambda _: usage.count_at(account_id, started, BOOTSTRAPS_PENDING, -1))
        return Reply(codes.CHANGED)

    def _forbid(self, identity: PeerIdentity, endpoint_name: str, remote: Address, why: str) -> Reply:
        self.stats.forbidden += 1
        log.warning(
            "bootstrap refused: DTLS identity %r (%s) from %s:%d asked for %r: %s",
            identity.name, identity.method, remote[0], remote[1], endpoint_name, why,
        )  # fmt: skip
        return Reply(codes.FORBIDDEN, payload=NOT_YOURS)

    def _warn_once(self, key: str, text: str, *args: object) -> None:
        if key not in self._warned and len(self._warned) < OUTCOMES_KEPT:
            self._warned.add(key)
            log.warning(text, *args)

    def _ended(self, endpoint_name: str, task: asyncio.Task[None]) -> None:
        if self._sessions.get(endpoint_name) is task:
            del self._sessions[endpoint_name]
            del self._peers[endpoint_name]

    def _dtls_ended(self, remote: Address, identity: PeerIdentity) -> None:
        """The DTLS session a bootstrap session talks to has ended (close_notify, idle, revoked): so does the
        bootstrap session, at once rather than after its request times out; what it has not written stays unsent."""
        peer = self._peers.get(identity.name)
        if peer is not None and peer.remote == remote and peer.identity == identity:
            peer.ended.set()

    # ---- the session ----------------------------------------------------------------------------------
    async def _session(self, endpoint_name: str, config: BootstrapConfig, peer: _Peer) -> None:
        try:
            await self._run(config, peer)
        except (BootstrapFailed, DeviceError, ValueError) as error:  # ValueError: an answer it could not read
            self.stats.failed += 1
            self._record(endpoint_name, f"failed: {error}")
            log.info("bootstrap of %r failed: %s", endpoint_name, error)
            await self._tell(config, False)
            return
        self.stats.completed += 1
        self._record(endpoint_name, "completed")
        log.info("bootstrapped %r to %s", endpoint_name, config.server_uri)
        await self._tell(config, True)

    async def _tell(self, config: BootstrapConfig, completed: bool) -> None:
        if self.on_ended is not None:
            try:
                await self.on_ended(config, completed)
            except Exception:  # the device is bootstrapped all the same; only its record is missing
                log.exception("recording the bootstrap of %r failed", config.endpoint_name)

    def _record(self, endpoint_name: str, outcome: str) -> None:
        self.outcomes.pop(endpoint_name, None)
        self.outcomes[endpoint_name] = outcome
        while len(self.outcomes) > OUTCOMES_KEPT:
            self.outcomes.popitem(last=False)

    async def _run(self, config: BootstrapConfig, peer: _Peer) -> None:
        request = peer.request
        accept = [(codes.ACCEPT, coap_encode_uint(LINK_FORMAT))]
        discover = await request(codes.GET, accept)
        keep: int | None = None
        if discover.code == codes.CONTENT:
            try:
                keep = bootstrap_account_instance(discover.payload)
            except LinkFormatError as error:
                raise BootstrapFailed(f"Bootstrap-Discover answer is not link format: {error}") from None
        elif discover.code not in (codes.BAD_REQUEST, codes.NOT_FOUND, codes.METHOD_NOT_ALLOWED):
            raise BootstrapFailed(f"Bootstrap-Discover answered {codes.dotted(discover.code)}")
        security_id = FALLBACK_SECURITY_INSTANCE if keep is None else (1 if keep == 0 else 0)
        for path in ("/0", "/1"):
            deleted = await request(codes.DELETE, codes.path_options(path))
            if deleted.code >> 5 != 2 and deleted.code != codes.NOT_FOUND:  # 4.04: nothing there to delete
                raise BootstrapFailed(f"Bootstrap-Delete {path} answered {codes.dotted(deleted.code)}")
        tlv = [(codes.CONTENT_FORMAT, coap_encode_uint(TLV))]
        for path, body in ((f"/0/{security_id}", security_instance(config)), ("/1/0", server_instance(config))):
            written = await request(codes.PUT, codes.path_options(path) + tlv, body)
            if written.code != codes.CHANGED:
                raise BootstrapFailed(f"Bootstrap-Write {path} answered {codes.dotted(written.code)}")
        finished = await request(codes.POST, codes.path_options("/bs"))
        if finished.code != codes.CHANGED:
            raise BootstrapFailed(f"Bootstrap-Finish answered {codes.dotted(finished.code)}")
