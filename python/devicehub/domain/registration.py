"""A registration's admission, and the transports a registration is made over (the registration itself is
domain/model.py's)."""

from __future__ import annotations

from dataclasses import dataclass, field

# the transport a registration was made over (`model.Registration.transport`): which listener reaches the device
UDP = "udp"  # CoAP over UDP, or DTLS when `secure`
TCP = "tcp"  # CoAP over TCP (RFC 8323), or TLS when `secure`: only on the connection the device opened


@dataclass(frozen=True, slots=True)
class Admission:
    """Which account a registering endpoint joins and the stable device-id it has there."""

    account_id: str
    device_id: str
    extra: dict[str, str] = field(default_factory=dict)
    new: bool = False  # the id was claimed by this admission: nothing is stored under it yet (issue 16 #1)
