"""The boundary between the LwM2M layer and the core: what the layer reports and what it offers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

# the transport a registration was made over (`Registration.transport`): which listener reaches the device
UDP = "udp"  # CoAP over UDP, or DTLS when `secure`
TCP = "tcp"  # CoAP over TCP (RFC 8323), or TLS when `secure`: only on the connection the device opened


@dataclass(frozen=True, slots=True)
class ResourceLink:
    """One CoRE link of a Register/Update payload (object, instance or resource level)."""

    path: str  # "/3/0/0", "/3303/0" or "/3303"
    rt: str | None = None
    ct: int | None = None  # content-format number
    obs: bool = False
    iface: str | None = None  # the link's `if` attribute
    value: bytes | None = None  # Pelion `;v=` value (opaque values arrive base64 and are decoded)
    aobs: int | None = None  # Pelion auto-observe token (decimal in the link, 2-byte token on the wire)
    deleted: bool = False  # Pelion `;d` in an Update: the resource was removed


@dataclass(frozen=True, slots=True)
class Registration:
    """A device's current registration as the LwM2M server holds it."""

    account_id: str
    device_id: str
    endpoint_name: str
    endpoint_type: str
    lifetime: int
    binding: str
    lwm2m_version: str
    links: tuple[ResourceLink, ...]
    address: tuple[str, int]
    registered_at: float  # clock seconds of the last full registration
    updated_at: float  # clock seconds of the last Register or Update
    queue_mode: bool = False
    domain: str | None = None
    gateway: str = ""  # `gw=`: the endpoint name of the Edge gateway hosting this device (devicehub's Edge Core)
    secure: bool = False  # made over DTLS by a peer that proved it is `endpoint_name` (issue 13 #2)
    transport: str = UDP  # UDP or TCP: of the last Register or Update, with `address` (they change together)


@dataclass(frozen=True, slots=True)
class DeviceResponse:
    """A device's answer to a server request; `code` is the CoAP code byte (0x45 = 2.05)."""

    code: int
    content_format: int | None = None
    payload: bytes = b""
    observe: int | None = None

    @property
    def success(self) -> bool:
        return self.code >> 5 == 2

    @property
    def dotted(self) -> str:
        return f"{self.code >> 5}.{self.code & 0x1F:02d}"


@dataclass(frozen=True, slots=True)
class Admission:
    """Which account a registering endpoint joins and the stable device-id it has there."""

    account_id: str
    device_id: str
    extra: dict[str, str] = field(default_factory=dict)
    new: bool = False  # the id was claimed by this admission: nothing is stored under it yet (issue 16 #1)


class DeviceEvents(Protocol):
    """Implemented by the core (domain/); called by the LwM2M server. Never raises into the layer."""

    async def admit(self, endpoint_name: str, endpoint_type: str, account_id: str | None = None) -> Admission | None:
        """Account and device-id for this endpoint, or None to refuse with 4.03; `account_id` is the account of
        the credential the device authenticated with (DTLS), which decides where it belongs."""

    async def registered(self, registration: Registration) -> None:
        """A full registration (first one, or a restart that replaces an earlier one)."""

    async def registered_many(self, registrations: Sequence[Registration]) -> None:
        """Full registrations of a batch (issue 16 #1): stored together, then each announced. Raises only when the
        batch could not be stored (then nothing of it was)."""

    async def resumed(self, registration: Registration) -> None:
        """A stored registration taken up without a Register: after a restart, or from another node."""

    async def updated(self, registration: Registration, added: tuple[ResourceLink, ...]) -> None:
        """A registration update; `added` holds the links not known before."""

    async def deregistered(self, registration: Registration) -> None:
        """The device sent De-register."""

    async def expired(self, registration: Registration) -> None:
        """The registration lifetime (plus grace) ran out."""

    def notification(
        self, device_id: str, path: str, content_format: int | None, payload: bytes, observe_seq: int | None
    ) -> None:
        """An observation notification (subscribed, auto-observed or LwM2M 1.1 Send)."""

    def notifications(self, values: Sequence[tuple[str, str, int | None, bytes, int | None]]) -> None:
        """Several notifications at once, in their order, each as `notification` takes it (a receive batch's)."""
