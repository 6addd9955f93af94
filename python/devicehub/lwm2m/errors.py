"""Why a message to a device did not get its answer; the domain treats each as a failed attempt.

Each kind knows the async-response it ends as once retries are spent (wire-format.md: 504 `TIMEOUT` only for
silence; a device that refuses the exchange or answers out of protocol is not a time-out).
"""

from __future__ import annotations


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
