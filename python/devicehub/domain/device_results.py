"""What a request to a device ends as: the device's answer, its HTTP status, or why no answer came.

Each failure kind knows the async-response it ends as once retries are spent (wire-format.md: 504 `TIMEOUT` only for
silence; a device that refuses the exchange or answers out of protocol is not a time-out).
"""

from __future__ import annotations

from dataclasses import dataclass


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


# async-response statuses: the device's answer as HTTP (wire-format.md), following the CoAP-to-HTTP mapping
# of RFC 8075 §7 where the wire format names no status (4.02 and 4.08 → 400, 5.05 → 502); keys are CoAP code bytes
_HTTP_STATUS = {
    0x41: 201,  # 2.01 Created
    0x42: 200,  # 2.02 Deleted
    0x43: 200,  # 2.03 Valid
    0x44: 200,  # 2.04 Changed
    0x45: 200,  # 2.05 Content
    0x5F: 200,  # 2.31 Continue
    0x80: 400,  # 4.00 Bad Request
    0x81: 401,  # 4.01 Unauthorized
    0x82: 400,  # 4.02 Bad Option
    0x83: 403,  # 4.03 Forbidden
    0x84: 404,  # 4.04 Not Found
    0x85: 405,  # 4.05 Method Not Allowed
    0x86: 406,  # 4.06 Not Acceptable
    0x88: 400,  # 4.08 Request Entity Incomplete
    0x89: 409,  # 4.09 Conflict
    0x8C: 412,  # 4.12 Precondition Failed
    0x8D: 413,  # 4.13 Request Entity Too Large
    0x8F: 415,  # 4.15 Unsupported Content-Format
    0x96: 422,  # 4.22 Unprocessable Entity
    0x9D: 429,  # 4.29 Too Many Requests
    0xA0: 500,  # 5.00 Internal Server Error
    0xA1: 501,  # 5.01 Not Implemented
    0xA2: 502,  # 5.02 Bad Gateway
    0xA3: 503,  # 5.03 Service Unavailable
    0xA4: 504,  # 5.04 Gateway Timeout
    0xA5: 502,  # 5.05 Proxying Not Supported
}


def http_status(code: int) -> int:
    """The HTTP status of a CoAP response code; an unknown detail counts as its class's x.00 (RFC 7252 §5.9)."""
    status = _HTTP_STATUS.get(code)
    if status is not None:
        return status
    return {2: 200, 4: 400}.get(code >> 5, 500)


class DeviceError(Exception):
    """Base of every device-side delivery failure."""

    status: int = 502
    token: str = "DEVICE_ERROR"


class DeviceTimeout(DeviceError):
    """No ACK within the retransmission window, or no response within MAX_TRANSMIT_WAIT."""

    status = 504
    token = "TIMEOUT"


class DeviceReset(DeviceError):
    """The device answered RST: it does not know the exchange (or cancels the observation)."""

    status = 502
    token = "DEVICE_RESET"


class DeviceProtocolError(DeviceError):
    """The device's answer breaks CoAP: an unrecognised critical option, a broken or oversized block transfer."""

    status = 502
    token = "BAD_DEVICE_RESPONSE"


class EndpointClosed(DeviceError):
    """The local CoAP endpoint was closed (the service is stopping) while the exchange was under way."""

    status = 503
    token = "NOT_CONNECTED"


class NotConnected(DeviceError):
    """The device registered over TCP (RFC 8323) and its connection is gone: it is reachable again only once it
    connects and sends Register or Update."""

    status = 503
    token = "NOT_CONNECTED"


class NotRegistered(DeviceError):
    """The device has no current registration on this server."""

    status = 503
    token = "NOT_CONNECTED"
