"""The domain's entities: one msgspec Struct per record the service keeps, shared by every store backend (the
stores persist them; the domain owns them, issue 29 #3)."""

from __future__ import annotations

import msgspec


class Account(msgspec.Struct, frozen=True, kw_only=True):
    id: str  # 32 lowercase hex
    name: str
    tier: str = "commercial"  # "commercial" | "free" (spec §8: free tier = one callback attempt)
    created_at: float


class ApiKey(msgspec.Struct, frozen=True, kw_only=True):
    id: str  # 32 lowercase hex, public identifier
    account_id: str
    name: str
    key_hash: str  # sha256 hex of the secret; the secret itself is never stored
    created_at: float
    revoked_at: float | None = None
    admin: bool = False  # in the account's Administrators group: may manage the account's keys over HTTP


# gc=False (issue 16 #1): records every registered device keeps, or that each registration builds, hold only scalars,
# tuples of such records and a str → str dict, so no reference cycle runs through them; untracked, they are not walked
# by each of the collector's full passes (in a py-spy profile of 5 000 registrations those passes were ~1/4 of the
# event loop's samples).
class ResourceLink(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One CoRE link of a device's object list (object, instance or resource level), as a Register/Update payload
    carries it and as the device record, the registration record and the registration event keep it (issue 29 #3:
    one class where there were five). The Rust link parser builds it positionally, in this field order."""

    path: str  # "/3/0/0", "/3303/0" or "/3303"
    rt: str | None = None
    ct: int | None = None  # content-format number (the API and channels show its MIME name, content_formats.py)
    obs: bool = False
    iface: str | None = None  # the link's `if` attribute
    value: bytes | None = None  # Pelion `;v=` value (opaque values arrive base64 and are decoded); never stored here
    aobs: int | None = None  # Pelion auto-observe token (decimal in the link, 2-byte token on the wire)
    deleted: bool = False  # Pelion `;d` in an Update: the resource was removed


class Device(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    id: str  # 32 lowercase hex, stable per (account, endpoint name)
    account_id: str
    endpoint_name: str
    endpoint_type: str = ""
    state: str = "registered"  # "registered" | "deregistered"
    queue_mode: bool = False
    lifetime: int = 0
    host_gateway: str = ""
    resources: tuple[ResourceLink, ...] = ()
    created_at: float
    updated_at: float  # last registration event
    last_seen_at: float  # last time the device talked (snapshot retention counts from here)
    # directory fields an application sets with `PUT /v3/devices/{id}`; a registration keeps them
    name: str = ""  # "" shows the endpoint name
    description: str = ""
    custom_attributes: dict[str, str] = {}
    auto_update: bool = False
    ca_id: str = ""
    device_key: str = ""


class PresubscriptionRule(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="kebab"):
    endpoint_name: str | None = None
    endpoint_type: str | None = None
    resource_path: tuple[str, ...] = ()


class ChannelDrops(msgspec.Struct, frozen=True):
    """Events a channel lost since it was created, by cause (kept across restarts)."""

    overflow: int = 0  # the byte cap (spec §8)
    expired: int = 0  # the lifetime
    failed: int = 0  # free tier: a batch whose one attempt failed
    delivered: int = 0  # issue 34 #1: cursor channels count deliveries too, so a restart knows the queue's head

    def __add__(self, other: ChannelDrops) -> ChannelDrops:
        return ChannelDrops(
            self.overflow + other.overflow,
            self.expired + other.expired,
            self.failed + other.failed,
            self.delivered + other.delivered,
        )

    @property
    def left_queue(self) -> int:
        """Events that left the queue from its head, by any cause."""
        return self.overflow + self.expired + self.failed + self.delivered


class ChannelSecret(msgspec.Struct, frozen=True, array_like=True):
    """A callback signing secret (issue 34 #3): `whsec_…`, signing until `until` (wall-clock s; None: current)."""

    value: str
    until: float | None = None


class ChannelConfig(msgspec.Struct, frozen=True, kw_only=True):
    key_id: str
    account_id: str
    kind: str  # "callback" | "websocket" | "pull"
    url: str = ""
    headers: dict[str, str] = {}
    serialization: dict[str, object] = {}  # wire-format.md channel serialization object, normalised
    free_tier: bool = False  # fixed at creation (spec §8: upgrades do not change existing channels)
    created_at: float
    secrets: list[ChannelSecret] = []  # callback signing secrets, newest first (issue 34 #3); never shown
    delivery: dict[str, object] = {}  # issue 34 #4: opt-in delivery control (channels/delivery.py), normalised


class DeviceRequest(msgspec.Struct, frozen=True, kw_only=True):
    async_id: str
    key_id: str
    account_id: str
    device_id: str
    method: str
    uri: str
    payload: bytes = b""
    content_type: str | None = None
    accept: str | None = None
    retries_left: int = 0
    created_at: float
    expires_at: float


# gc=False (issue 30 #2): every device's latest value is held between folds (store/sqlite/reported_log.py) in a dict
# per device, and a dict stays out of the collector only while what it holds does: at 50 000 devices a fold period's
# 50 000 such dicts were each young collection's work (40 ms a pass) and were promoted into the passes over the old
# generations. Scalars only, so no cycle can run through a value.
class ReportedValue(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    value: bytes
    content_type: str
    reported_at: float
    max_age: int | None = None


class LastSuccess(msgspec.Struct, frozen=True, kw_only=True):
    """The last write the device accepted, kept while a later write is pending or has failed (issue 12 §8)."""

    value: bytes
    content_type: str = ""
    desired_at: float


class DesiredValue(msgspec.Struct, frozen=True, kw_only=True):
    value: bytes
    desired_at: float
    status: int  # spec §3.1: 0 pending, 1 success, 2 failure
    status_updated_at: float
    content_type: str = ""  # MIME name of `value` as written ("" in records from before issue 12)
    request_id: str = ""  # "<key id>/<async id>" of the write this entry describes
    last_success: LastSuccess | None = None


class SnapshotResource(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    reported: ReportedValue | None = None
    desired: DesiredValue | None = None
    subscribed: bool = False


class StoredEvent(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """One queued channel event as the journal keeps it."""

    kind: int
    data: bytes
    queued_at_ms: int
    device: str = ""  # issue 34 #2: the device it came from (per-device sequences); "" when none
    origin: str = ""  # Redis mode, cursor channels: the forwarding node's id of it, so a re-drained one is known


class Registration(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A device's live LwM2M registration: as the LwM2M server holds it, and as it is stored so any node (or a
    restarted one) accepts the device's next Update (issue 12 #5) — one class for both (issue 29 #3). `expires_at` is
    when it expires unless updated: updated_at + lifetime + grace, set by the Register or Update that made it."""

    device_id: str
    account_id: str
    endpoint_name: str
    endpoint_type: str = ""
    lifetime: int
    binding: str = "U"
    lwm2m_version: str = "1.0"
    links: tuple[ResourceLink, ...] = ()  # none deleted; stored without values (they go to the snapshot)
    host: str  # with `port`: where the device is reached, of the last Register or Update (with `transport`)
    port: int
    registered_at: float  # clock seconds of the last full registration
    updated_at: float  # clock seconds of the last Register or Update
    expires_at: float
    queue_mode: bool = False
    domain: str | None = None
    secure: bool = False  # made over DTLS (issue 13 #2): only that authenticated peer may continue it
    transport: str = "udp"  # registration.UDP or TCP; older records decode as "udp", as they were treated
    # `gw=`: the Edge gateway a child registered through; the node that takes the registration up lets that gateway's
    # identity continue it (older records decode as "": their children re-register through their gateway)
    gateway: str = ""

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port


class ObservationRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An observation by token, so notifications are understood by any node (issue 12 #5)."""

    token: bytes
    device_id: str
    path: str
    auto: bool = False  # adopted from a Pelion `aobs` link
    last_seq: int | None = None
    last_at: float = 0.0


class BootstrapConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the bootstrap server installs in a device's Security (/0) and Server (/1) objects (LwM2M 1.1 §5.2).

    Keyed by endpoint name across the whole service (a device names only itself in `POST /bs?ep=`); owned by
    one account."""

    endpoint_name: str
    account_id: str
    server_uri: str  # /0/x/0
    security_mode: int  # /0/x/2: 0 PSK, 1 RPK, 2 certificate, 3 NoSec, 4 certificate with EST
    public_identity: bytes = b""  # /0/x/3: PSK identity or the client's certificate / public key
    server_public_key: bytes = b""  # /0/x/4
    secret_key: bytes = b""  # /0/x/5: PSK or private key
    short_server_id: int = 1  # /0/x/10 and /1/x/0
    lifetime: int = 86_400  # /1/x/1
    binding: str = "U"  # /1/x/7
    created_at: float
    updated_at: float


class DeviceSharedKey(msgspec.Struct, frozen=True, kw_only=True):
    """A device's DTLS pre-shared key (Pelion `device-shared-keys`); the PSK identity is the endpoint name."""

    endpoint_name: str
    account_id: str
    sealed_secret: bytes  # AES-GCM nonce ‖ ciphertext under the node's secret key (domain/credentials.py)
    created_at: float


class TrustedCa(msgspec.Struct, frozen=True, kw_only=True):
    """A CA certificate an account trusts for its devices' DTLS client certificates."""

    id: str  # 32 lowercase hex
    account_id: str
    name: str
    pem: str
    subject: str
    not_after: float
    created_at: float
