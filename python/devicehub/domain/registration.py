"""A device's registration as the domain sees it: its links, the transport it came over, its admission."""

from __future__ import annotations

from dataclasses import dataclass, field

from devicehub.domain.model import ResourceLink

# the transport a registration was made over (`Registration.transport`): which listener reaches the device
UDP = "udp"  # CoAP over UDP, or DTLS when `secure`
TCP = "tcp"  # CoAP over TCP (RFC 8323), or TLS when `secure`: only on the connection the device opened


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
class Admission:
    """Which account a registering endpoint joins and the stable device-id it has there."""

    account_id: str
    device_id: str
    extra: dict[str, str] = field(default_factory=dict)
    new: bool = False  # the id was claimed by this admission: nothing is stored under it yet (issue 16 #1)
