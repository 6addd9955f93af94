"""Type stubs for `devicehub._core`, the Rust core (checked by `python -m mypy.stubtest devicehub._core`)."""

import os
from collections.abc import Callable, Sequence
from typing import Any, Final, Self, TypeAlias, final

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_LIFETIME_MS",
    "DEFAULT_MAX_BYTES",
    "EVENT_OVERHEAD_BYTES",
    "KIND_ASYNC_RESPONSE",
    "KIND_DE_REGISTRATION",
    "KIND_FIRMWARE_UPDATE",
    "KIND_NOTIFICATION",
    "KIND_REGISTRATION",
    "KIND_REGISTRATIONS_EXPIRED",
    "KIND_REG_UPDATE",
    "MAX_CHUNK_SIZE",
    "TLV_MULTIPLE_RESOURCE",
    "TLV_OBJECT_INSTANCE",
    "TLV_RESOURCE",
    "TLV_RESOURCE_INSTANCE",
    "Batch",
    "CborError",
    "ChannelQueue",
    "CoapError",
    "CoapMessage",
    "CoapNotification",
    "CoreError",
    "DtlsConnector",
    "DtlsError",
    "DtlsServer",
    "DtlsSession",
    "LatencyHistogram",
    "LinkFormatError",
    "LinkTable",
    "ObserveLane",
    "ObserveOrder",
    "QueueError",
    "RequestLog",
    "TlsConnector",
    "TlsServer",
    "TlsSession",
    "TlvError",
    "TlvNode",
    "UdpReceiver",
    "__version__",
    "coap_decode",
    "coap_encode",
    "coap_encode_uint",
    "lwm2m_cbor_decode",
    "lwm2m_cbor_encode",
    "parse_links",
    "senml_cbor_decode",
    "senml_cbor_encode",
    "tlv_bool",
    "tlv_decode",
    "tlv_encode",
    "tlv_float",
    "tlv_int",
    "tlv_objlnk",
    "tlv_read_bool",
    "tlv_read_float",
    "tlv_read_int",
    "tlv_read_objlnk",
    "udp_send_batch",
]

__version__: str

class CoreError(ValueError):
    """Base class of every error raised by devicehub._core."""

class TlvError(CoreError):
    """Malformed or unencodable OMA-TLV."""

class CborError(CoreError):
    """Malformed or unencodable SenML CBOR or LwM2M CBOR."""

class CoapError(CoreError):
    """Malformed or unencodable CoAP message."""

class QueueError(CoreError):
    """Invalid channel queue operation."""

class LinkFormatError(CoreError):
    """A payload that is not CoRE link format devicehub can read."""

class DtlsError(CoreError):
    """A DTLS server that cannot be set up, or a record too large to send."""

# ---- channel queue (spec §6, §8) -------------------------------------------------------------

KIND_NOTIFICATION: Final[int]
KIND_REGISTRATION: Final[int]
KIND_REG_UPDATE: Final[int]
KIND_DE_REGISTRATION: Final[int]
KIND_REGISTRATIONS_EXPIRED: Final[int]
KIND_ASYNC_RESPONSE: Final[int]
KIND_FIRMWARE_UPDATE: Final[int]
EVENT_OVERHEAD_BYTES: Final[int]
DEFAULT_MAX_BYTES: Final[int]
DEFAULT_LIFETIME_MS: Final[int]
DEFAULT_CHUNK_SIZE: Final[int]
MAX_CHUNK_SIZE: Final[int]

@final
class Batch:
    """Events taken from a queue: a ready NotificationMessage body, kept whole for `put_back`."""

    @property
    def body(self) -> bytes:
        """The NotificationMessage JSON: one array per kind present, events in queue order."""
    @property
    def count(self) -> int:
        """Number of events in the batch."""
    def events(self) -> list[tuple[int, bytes, int]]:
        """The events as (kind, encoded event, queued-at epoch ms), oldest first."""
    def count_waits(self, now_ms: int, bounds_ms: list[int], counts: list[int]) -> tuple[list[int], int]:
        """Add each event's wait until `now_ms` to `counts` (a slot per upper bound in `bounds_ms`, inclusive,
        then one for longer waits); returns the counts and the waits' sum in ms."""

@final
class ChannelQueue:
    """A per-API-key FIFO of pre-encoded events with a byte cap and an event lifetime."""

    def __new__(cls, max_bytes: int = ..., lifetime_ms: int = ...) -> ChannelQueue: ...
    def push(self, kind: int, event: bytes, now_ms: int) -> int:
        """Append one event; returns how many oldest events were dropped to stay under the cap."""
    def take_batch(self, max_items: int, now_ms: int, max_body_bytes: int | None = None) -> Batch | None:
        """Expire old events, then take up to `max_items` (1…20 000) from the head; None when empty.

        With `max_body_bytes`, the batch stops before its events' bytes exceed it (the head event always
        goes), so a receiver's frame or body limit is never exceeded by batching alone.
        """
    def put_back(self, batch: Batch) -> int:
        """Return an undelivered batch to the head, order kept; returns events dropped by the cap."""
    def expire(self, now_ms: int) -> int:
        """Remove events older than the lifetime; returns how many."""
    def take_dropped(self) -> list[tuple[int, bytes, int, str]]:
        """The events the cap or the lifetime removed since the last call, as (kind, encoded event, queued-at
        epoch ms, cause "byte_cap" | "lifetime"), in the order they left; at most one byte cap's worth is kept
        (the oldest of them go first)."""
    def clear(self) -> int:
        """Remove every event; returns how many."""
    def snapshot(self) -> list[tuple[int, bytes, int]]:
        """Every queued event as (kind, encoded event, queued-at epoch ms), oldest first."""
    def __len__(self) -> int: ...
    @property
    def bytes_used(self) -> int:
        """Storage cost of the queued events: payload bytes plus EVENT_OVERHEAD_BYTES each."""
    @property
    def max_bytes(self) -> int: ...
    @property
    def lifetime_ms(self) -> int: ...
    @property
    def dropped_overflow(self) -> int:
        """Events dropped because the byte cap was exceeded, since creation."""
    @property
    def dropped_expired(self) -> int:
        """Events dropped because they outlived the lifetime, since creation."""
    @property
    def pushed_total(self) -> int:
        """Events pushed since creation."""

# ---- OMA-TLV (LwM2M 1.0 §6.4.3) --------------------------------------------------------------

TLV_OBJECT_INSTANCE: Final[int]
TLV_RESOURCE_INSTANCE: Final[int]
TLV_MULTIPLE_RESOURCE: Final[int]
TLV_RESOURCE: Final[int]

@final
class TlvNode:
    """One TLV: a resource (value) or resource instance (value), or a container with children."""

    def __new__(cls, kind: int, id: int, value: bytes = b"", children: Sequence[TlvNode] | None = None) -> TlvNode: ...
    @property
    def kind(self) -> int: ...
    @property
    def id(self) -> int: ...
    @property
    def value(self) -> bytes: ...
    @property
    def children(self) -> list[TlvNode]: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def tlv_decode(data: bytes) -> list[TlvNode]:
    """Decode a TLV run; raises TlvError on malformed input."""

def tlv_encode(nodes: Sequence[TlvNode]) -> bytes:
    """Encode nodes with the shortest headers; raises TlvError for invalid trees."""

def tlv_int(value: int) -> bytes:
    """Two's-complement integer in the shortest of 1/2/4/8 bytes (also used for Time)."""

def tlv_read_int(data: bytes) -> int: ...
def tlv_float(value: float) -> bytes:
    """4 bytes when the value survives binary32 exactly, else 8."""

def tlv_read_float(data: bytes) -> float: ...
def tlv_bool(value: bool) -> bytes: ...
def tlv_read_bool(data: bytes) -> bool: ...
def tlv_objlnk(object_id: int, instance_id: int) -> bytes: ...
def tlv_read_objlnk(data: bytes) -> tuple[int, int]: ...

# ---- CoAP (RFC 7252, 7641, 7959) -------------------------------------------------------------

@final
class CoapMessage:
    """A decoded CoAP message with the options devicehub reads pre-parsed."""

    @property
    def mtype(self) -> int:
        """0 CON, 1 NON, 2 ACK, 3 RST."""
    @property
    def code(self) -> int:
        """Code byte: class << 5 | detail (0x01 GET, 0x45 2.05)."""
    @property
    def mid(self) -> int: ...
    @property
    def token(self) -> bytes: ...
    @property
    def options(self) -> list[tuple[int, bytes]]:
        """Every option as (number, raw value), in wire order."""
    def has_option(self, number: int) -> bool:
        """Whether an option numbered `number` is present: a check that builds no option list."""
    @property
    def payload(self) -> bytes: ...
    @property
    def uri_path(self) -> str:
        """Uri-Path segments joined with '/', with a leading '/' ('/' when absent)."""
    @property
    def uri_query(self) -> list[str]: ...
    @property
    def location_path(self) -> list[str]: ...
    @property
    def unrecognised_critical(self) -> int | None:
        """The first critical option devicehub does not act on (RFC 7252 §5.4.1), in wire order, or None."""
    @property
    def observe(self) -> int | None: ...
    @property
    def content_format(self) -> int | None: ...
    @property
    def accept(self) -> int | None: ...
    @property
    def block1(self) -> tuple[int, bool, int] | None:
        """(block number, more flag, size exponent) of Block1."""
    @property
    def block2(self) -> tuple[int, bool, int] | None: ...

def coap_decode(data: bytes) -> CoapMessage:
    """Decode one datagram; raises CoapError on malformed input."""

def coap_encode(
    mtype: int, code: int, mid: int, token: bytes, options: Sequence[tuple[int, bytes]], payload: bytes = b""
) -> bytes:
    """Encode one message; options are sorted by number (stable), delta-encoded."""

def coap_encode_uint(value: int) -> bytes:
    """Minimal big-endian unsigned option value (0 → empty)."""

@final
class CoapNotification:
    """One observation's notification encoded once; `encode` fills in the message ID, Observe value
    and payload (the simulator's hot path: no options list is built per notification)."""

    def __new__(cls, mtype: int, code: int, token: bytes, options: Sequence[tuple[int, bytes]]) -> Self: ...
    def encode(self, mid: int, observe: int, payload: bytes) -> bytes:
        """The datagram of one notification: the bytes `coap_encode` gives with Observe `observe` added;
        raises CoapError for an Observe value over 2**24-1 or a datagram over 64 KiB."""

# ---- SenML CBOR (112) and LwM2M CBOR (11544) --------------------------------------------------

_CborValue: TypeAlias = int | float | bool | str | bytes  # an objlnk is text "oid:iid"

def lwm2m_cbor_decode(data: bytes) -> list[tuple[tuple[int, ...], _CborValue]]:
    """Decode LwM2M CBOR (11544) into (path ids, value) pairs; raises CborError."""

def lwm2m_cbor_encode(entries: Sequence[tuple[Sequence[int], _CborValue]]) -> bytes:
    """Encode (path ids, value) pairs as LwM2M CBOR nested maps; raises CborError."""

def senml_cbor_decode(data: bytes) -> list[tuple[str, _CborValue]]:
    """Decode SenML CBOR (112) into (bn + n, value) pairs, bv applied; raises CborError."""

def senml_cbor_encode(entries: Sequence[tuple[str, _CborValue]], base_name: str = "") -> bytes:
    """Encode (name, value) pairs as SenML CBOR records, `bn` on the first; raises CborError."""

# ---- CoRE link format (RFC 6690, lwm2m-device-side.md §2, §8) --------------------------------
_LinkFields: TypeAlias = tuple[str, str | None, int | None, bool, str | None, bytes | None, int | None, bool]

def parse_links(payload: bytes) -> list[_LinkFields]:
    """Every object, instance or resource link of a Register/Update payload as tuples in
    `ResourceLink` field order; raises `LinkFormatError` with the pure parser's message."""

@final
class LinkTable:
    """Parsed links as shared objects (issue 16: a fleet registers the same links over and over): the
    one object `make(*fields)` built for an equal link since the table last started afresh. Looked
    up by the parsed link in Rust, so a link seen before costs no Python string, tuple or call; a
    full table starts afresh (objects already handed out stay shared), so unique values such as
    serial numbers never pin more than `capacity` entries."""

    def __new__(cls, make: Callable[..., Any], capacity: int = 65_536) -> LinkTable: ...
    def parse(self, payload: bytes) -> list[Any]:
        """Every object, instance or resource link of a Register/Update payload, shared as above;
        raises `LinkFormatError` as `parse_links` does."""

    def get(
        self,
        path: str,
        rt: str | None,
        ct: int | None,
        obs: bool,
        iface: str | None,
        value: bytes | None,
        aobs: int | None,
        deleted: bool,
    ) -> Any:
        """The shared object of one link given by its fields (a stored registration's links)."""

    def __len__(self) -> int: ...

# ---- latency histogram -------------------------------------------------------------------------

@final
class LatencyHistogram:
    """Values (the simulator records latencies in microseconds) in log buckets: percentiles within
    1.6 % of the value, fixed memory. Mutable: `record` adds to it."""

    def __new__(cls) -> Self: ...
    def record(self, value: int) -> None:
        """Record one value (negative values count as 0)."""
    def merge(self, other: LatencyHistogram) -> None:
        """Add every value of `other`."""
    def percentile(self, percentile: float) -> int:
        """The value below or at which `percentile` % of the values lie (0 when empty): the highest value of
        its bucket, at most the largest value recorded."""
    @property
    def count(self) -> int: ...
    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int: ...
    @property
    def mean(self) -> float: ...

def udp_send_batch(fd: int, datagrams: Sequence[tuple[bytes, tuple[str, int]]]) -> int:
    """Send every (payload, (host, port)) on the UDP socket `fd` with as few `sendmmsg` calls as it takes,
    without blocking; return how many went out, in order from the first (fewer when the socket would block).

    Raises ValueError (before sending any) for a host that is not an IP address literal, OSError when not even
    the first datagram could be sent, and OSError everywhere but Linux."""

# ---- DTLS 1.2 server record layer (issue 13 #1; OpenSSL on memory pipes) -----------------------

@final
class DtlsServer:
    """A DTLS 1.2 server: the LwM2M suites, its certificate, a PSK table, stateless HelloVerifyRequest cookies
    (HMAC of the peer address), a session-ID cache for resumption and session tickets under a key ring the caller
    installs (`set_ticket_keys`; issue 31 #5)."""

    def __new__(cls, certificate: bytes, key: bytes, *, cache_size: int = 20_000, cache_timeout: int = 86_400) -> Self:
        """`certificate` and `key` (PKCS#8 or traditional) as DER; DtlsError when they do not match."""
    def set_psk(self, identity: bytes, key: bytes) -> None:
        """Sets an identity's key (at most 64 bytes); DtlsError for an empty identity or key."""
    def remove_psk(self, identity: bytes) -> bool:
        """Removes an identity; its cached sessions stay until `forget`."""
    def psk_count(self) -> int: ...
    def set_ticket_keys(self, keys: list[bytes]) -> None:
        """The session-ticket key ring, each key 80 bytes (name, HMAC key, AES key): `keys[0]` seals new tickets,
        every key opens them (a ticket under another than the first is renewed); empty: no tickets. A PSK ticket
        resumes only while its identity has the key it was made with. DtlsError for a key of another length or a
        name twice."""
    def ticket_key_count(self) -> int: ...
    def set_ticket_issuers(self, subjects: list[bytes]) -> None:
        """The CAs (DER subject names) trusted now: a certificate session's ticket resumes only while its
        certificate's issuer is among them (else a full handshake)."""
    def forget(self, tag: str) -> int:
        """Drops the cached sessions `DtlsSession.remember` tagged `tag`; how many."""
    def tagged_count(self) -> int: ...
    def accept(self, peer: bytes, datagram: bytes) -> tuple[DtlsSession | None, list[bytes]]:
        """A datagram from a peer without a session: (None, [HelloVerifyRequest]) for a hello without a valid
        cookie (nothing kept), (session, flight) for one with it, (None, []) for anything else."""

@final
class DtlsSession:
    """One peer's DTLS session: its handshake, then its records."""

    def feed(self, datagram: bytes) -> tuple[list[bytes], list[bytes]]:
        """(decrypted application records, datagrams to send); then check `established`, `failure`, `closed`."""
    def send(self, data: bytes) -> list[bytes]:
        """`data` as one record: the datagrams to send; DtlsError above 16 KiB."""
    def shutdown(self) -> list[bytes]:
        """close_notify, when established."""
    def handle_timeout(self) -> list[bytes]:
        """The last handshake flight again, if OpenSSL's retransmission timer ran out."""
    def timeout(self) -> float | None:
        """Seconds until the handshake's retransmission timer runs out (RFC 6347 §4.2.4: 1 s, doubled per
        retransmission up to 60 s), when `handle_timeout` is due; None once the handshake is over."""
    @property
    def established(self) -> bool: ...
    @property
    def failure(self) -> str | None:
        """Why the handshake failed (its alert was in the output)."""
    @property
    def closed(self) -> bool:
        """The peer sent close_notify or a fatal alert, or the session was shut down."""
    def session_reused(self) -> bool:
        """The handshake resumed a cached session (abbreviated)."""
    @property
    def cipher(self) -> str | None:
        """The negotiated suite's IANA name, e.g. `TLS_PSK_WITH_AES_128_CCM_8`."""
    @property
    def psk_identity(self) -> str | None:
        """The PSK identity offered (also in a failed handshake) or of the resumed session."""
    @property
    def peer_certificate(self) -> bytes | None:
        """The client's certificate as DER (a resumed session keeps it)."""
    def remember(self, server: DtlsServer, tag: str) -> None:
        """Tags this session's cache entry with the credential that proved it, for `DtlsServer.forget`."""
    def discard(self, server: DtlsServer) -> None:
        """Drops this session from the cache: it cannot be resumed."""
    def resumable(self) -> bytes | None:
        """A client's established session as DER (with the server's ticket, if it gave one), to offer again with
        `DtlsConnector.connect(session=...)`; None before the handshake is over."""

@final
class UdpReceiver:
    """`recvmmsg` into buffers allocated once: up to `max_datagrams` (1-1024) datagrams of up to `max_size` bytes
    each per call (a longer one is cut to `max_size`: size it one above the largest accepted). Linux only:
    elsewhere the constructor raises OSError."""

    def __new__(cls, max_datagrams: int, max_size: int) -> UdpReceiver: ...
    @property
    def capacity(self) -> int:
        """How many datagrams one `receive` takes at most."""

    def receive(self, fd: int) -> list[tuple[bytes, tuple[str, int]]]:
        """The datagrams waiting on the UDP socket `fd`, up to `capacity`, each with its sender `(host, port)`,
        in one system call without blocking; empty when none waits. The same address tuple comes back for every
        datagram of a peer. Raises OSError for the socket's error (an ICMP error queued by the kernel, reported
        once; with IP_RECVERR set its error queue is emptied too) or a bad descriptor."""

    def receive_sifting(
        self, fd: int, lane: ObserveLane, now: float
    ) -> tuple[
        list[tuple[bytes, tuple[str, int]]],
        list[tuple[str, str, int | None, bytes, int]],
        list[tuple[bytes, tuple[str, int]]],
        tuple[int, int, int],
    ]:
        """`receive`, each datagram offered to `lane` first. Returns `(others, values, acks, (taken, duplicates,
        stale))`: the datagrams the lane left, as `receive` gives them; the new values of armed observations as
        `(device_id, path, content_format, payload, observe)`, each observation's `ObserveOrder` moved on (a number
        not newer, RFC 7641 §3.4, is dropped as stale); the empty ACKs of the CON notifications (and of
        their retransmissions) taken, as `(ack, (host, port))`, for the caller to send; and the datagrams the lane
        took, the retransmissions among them and the stale numbers among them."""

@final
class ObserveOrder:
    """The order of one observation's notifications (RFC 7641 §3.4), owned here for both notification paths (issue
    29 #6): the last Observe number taken (None until the first of the stream) and when. The lane moves it on for
    what it takes; the Python path asks `advance` for what it takes. The one freshness rule: a number is newer if
    (V1 < V2 and V2 - V1 < 2^23) or (V1 > V2 and V1 - V2 > 2^23) or it came more than 128 s after the last one."""

    def __new__(cls, last_seq: int | None = None, last_at: float = 0.0) -> ObserveOrder: ...
    @property
    def last_seq(self) -> int | None: ...
    @property
    def last_at(self) -> float: ...
    def advance(self, seq: int, now: float) -> bool:
        """Take Observe number `seq`, received at `now`, if it is newer than the last one (it becomes the last);
        False, the order unchanged, for a stale one."""

    def restart(self, seq: int | None, now: float) -> None:
        """A new stream starts at `now` (RFC 7641 §4.1's re-registration): its first number is `seq` whatever the
        old stream's last one was (None: not known yet, any number is taken next)."""

@final
class ObserveLane:
    """The plain UDP listener's steady-state notifications (issue 15 #2): observations the server armed, by
    (address, token), recognised in `UdpReceiver.receive_sifting` without Python per datagram — a 2.xx NON or CON
    response with Observe, every critical option understood, no Block2 transfer — and CON ones acknowledged (their
    message IDs remembered, at most `max_acked` for `lifetime` seconds, so a retransmission is acknowledged
    again). Anything else of an armed token goes to the Python path and disarms it. A value is taken only if its
    observation's `ObserveOrder` takes its number. ValueError for `max_acked` < 1 or a non-positive lifetime."""

    def __new__(cls, max_acked: int, lifetime: float, max_datagram: int) -> ObserveLane: ...
    def arm(self, device_id: str, address: tuple[str, int], token: bytes, path: str, order: ObserveOrder) -> bool:
        """Arm `token` of `device_id` at `address` (whatever another device had armed there, or this device at
        another address, is disarmed); each value moves `order` on, the same object the server's Python path asks
        (issue 29 #6); a CON notification's ACK is addressed to `address`, this object (issue 30 #2). False, nothing
        armed, for a host that is not an IP literal or a token longer than 8 bytes."""

    def disarm_device(self, device_id: str) -> None: ...
    def disarm_remote(self, address: tuple[str, int]) -> None: ...
    def disarm_token(self, address: tuple[str, int], token: bytes) -> None: ...
    def sift(
        self, datagrams: list[bytes], address: tuple[str, int], now: float
    ) -> tuple[
        list[bytes],
        list[tuple[str, str, int | None, bytes, int]],
        list[tuple[bytes, tuple[str, int]]],
        tuple[int, int, int],
    ]:
        """Offer datagrams that came from `address` by other means than `UdpReceiver.receive_sifting` (a DTLS
        session's decrypted records); returns what `receive_sifting` does, the datagrams left being the objects
        given and the ACKs addressed to `address`."""

    def clear(self) -> None: ...
    def prune(self, now: float) -> None:
        """Forget acknowledged message IDs older than the lifetime."""

    @property
    def armed(self) -> int:
        """Observations armed."""

    @property
    def acked(self) -> int:
        """Acknowledged message IDs remembered."""

@final
class RequestLog:
    """The device-request queue in its own SQLite file (created at `path`), run by a thread that needs no GIL.
    Each job method hands its job over with a caller-chosen `ticket` and returns at once (OSError once closed);
    jobs run in order, in batches of one transaction. When `wake_fd()` becomes readable, `take()` returns the
    finished outcomes `(ticket, ok, value)`: `value` is the job's result when `ok`, else `(disk_fault, message)`.
    Unix only."""

    def __new__(cls, path: str | os.PathLike[str]) -> RequestLog: ...
    def wake_fd(self) -> int: ...
    def enqueue(self, ticket: int, key_id: str, async_id: str, device_id: str, data: bytes, max_pending: int) -> None:
        """Result: 0 queued, 1 the async-id is pending for the key, 2 the device has `max_pending` queued (0: no
        bound)."""

    def update(self, ticket: int, key_id: str, async_id: str, data: bytes) -> None: ...
    def remove(self, ticket: int, key_id: str, async_id: str) -> None:
        """Result: whether it was queued."""

    def remove_device(self, ticket: int, device_id: str) -> None: ...
    def pending(self, ticket: int, device_id: str) -> None:
        """Result: the device's records, oldest first."""

    def devices_with_pending(self, ticket: int, device_ids: Sequence[str]) -> None:
        """Result: those of `device_ids` with a request queued."""

    def all(self, ticket: int) -> None: ...
    def count(self, ticket: int) -> None: ...
    def find(self, ticket: int, key_id: str, async_id: str) -> None:
        """Result: the record, or None."""

    def import_rows(self, ticket: int, rows: Sequence[tuple[str, str, str, bytes]]) -> None:
        """Rows `(key_id, async_id, device_id, data)` in their order; one whose async-id is queued is skipped."""

    def take(self) -> list[tuple[int, bool, Any]]: ...
    def close(self) -> None:
        """Refuses new jobs and returns once the thread has run those handed over (their outcomes stay to take)."""

# ---- TLS over TCP, and the (D)TLS clients (rust/io/src/tls.rs) --------------------------------------------------

@final
class TlsServer:
    """A TLS 1.2 server for CoAP over TLS: the LwM2M suites, its certificate, a PSK table, any client certificate
    requested (the caller judges it), ALPN `coap`, resumption by session tickets under the key ring the caller installs
    (as `DtlsServer.set_ticket_keys`; issue 31 #5)."""

    def __new__(cls, certificate: bytes, key: bytes) -> Self:
        """`certificate` and `key` (PKCS#8 or traditional) as DER; DtlsError when they do not match."""
    def set_ticket_keys(self, keys: list[bytes]) -> None:
        """The session-ticket key ring, as `DtlsServer.set_ticket_keys`."""
    def set_ticket_issuers(self, subjects: list[bytes]) -> None:
        """As `DtlsServer.set_ticket_issuers`."""
    def accept(self) -> TlsSession:
        """A new connection's session, waiting for the ClientHello."""
    def set_psk(self, identity: bytes, key: bytes) -> None:
        """Sets an identity's key (at most 64 bytes); DtlsError for an empty identity or key."""
    def remove_psk(self, identity: bytes) -> bool: ...
    def psk_count(self) -> int: ...

@final
class TlsSession:
    """One TLS connection on a byte pipe, server or client side: its handshake, then its records."""

    def start(self) -> bytes:
        """A client's ClientHello (the handshake run as far as it goes with nothing received)."""
    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """(decrypted application data, bytes to send); then check `established`, `failure`, `closed`."""
    def send(self, data: bytes) -> bytes:
        """`data` (any length) as records: the bytes to send."""
    def shutdown(self) -> bytes:
        """close_notify, when established."""
    @property
    def established(self) -> bool: ...
    @property
    def failure(self) -> str | None:
        """Why the handshake failed (its alert was in the output)."""
    @property
    def closed(self) -> bool:
        """The peer sent close_notify or a fatal alert, or the session was shut down."""
    @property
    def cipher(self) -> str | None:
        """The negotiated suite's IANA name, e.g. `TLS_PSK_WITH_AES_128_CCM_8`."""
    @property
    def psk_identity(self) -> str | None:
        """The PSK identity offered (also in a failed handshake)."""
    @property
    def peer_certificate(self) -> bytes | None:
        """The peer's certificate as DER."""
    def session_reused(self) -> bool:
        """The handshake resumed an earlier session (abbreviated: a ticket the server took)."""
    def resumable(self) -> bytes | None:
        """A client's established session as DER, with the server's ticket when it gave one, to offer again
        (`TlsConnector.connect(session=...)`); None before the handshake is over."""

@final
class TlsConnector:
    """A TLS 1.2 client (ALPN `coap`); each connection brings its credential. The server's certificate is not
    checked."""

    def __new__(cls) -> Self: ...
    def connect(
        self,
        *,
        psk_identity: bytes = b"",
        psk_key: bytes = b"",
        certificate: bytes = b"",
        key: bytes = b"",
        session: bytes | None = None,
    ) -> TlsSession:
        """A new connection proving itself with a PSK, or a certificate and key (PEM), offering to resume `session`
        (`TlsSession.resumable()` of an earlier one; one that does not decode is not offered); `start()` gives its
        ClientHello. DtlsError for an unreadable or mismatched certificate and key, or an empty or over-long PSK."""

@final
class DtlsConnector:
    """A DTLS 1.2 client; each session brings its credential. The server's certificate is not checked."""

    def __new__(cls) -> Self: ...
    def connect(
        self,
        *,
        psk_identity: bytes = b"",
        psk_key: bytes = b"",
        certificate: bytes = b"",
        key: bytes = b"",
        session: bytes | None = None,
    ) -> tuple[DtlsSession, list[bytes]]:
        """A new session proving itself with a PSK, or a certificate and key (PEM), and its ClientHello, offering
        to resume `session` (`DtlsSession.resumable()` of an earlier one; one that does not decode is not offered);
        `DtlsSession.timeout` says when to call `handle_timeout`. DtlsError as `TlsConnector.connect`."""
