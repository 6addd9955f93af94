"""Why a message to a device did not get its answer; the domain treats each as a failed attempt."""

from __future__ import annotations


class DeviceError(Exception):
    """Base of every device-side delivery failure."""


class DeviceTimeout(DeviceError):
    """No ACK within the retransmission window, or no response within MAX_TRANSMIT_WAIT."""


class DeviceReset(DeviceError):
    """The device answered RST: it does not know the exchange (or cancels the observation)."""


class NotRegistered(DeviceError):
    """The device has no current registration on this server."""
