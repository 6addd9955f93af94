"""Events the core hands to channels; each channel encodes them with its own serialization options."""

from __future__ import annotations

import msgspec

from devicehub._core import (
    KIND_ASYNC_RESPONSE,
    KIND_DE_REGISTRATION,
    KIND_FIRMWARE_UPDATE,
    KIND_NOTIFICATION,
    KIND_REG_UPDATE,
    KIND_REGISTRATION,
    KIND_REGISTRATIONS_EXPIRED,
)
from devicehub.domain.model import ResourceLink

__all__ = [
    "KIND_ASYNC_RESPONSE",
    "KIND_DE_REGISTRATION",
    "KIND_FIRMWARE_UPDATE",
    "KIND_NOTIFICATION",
    "KIND_REGISTRATION",
    "KIND_REGISTRATIONS_EXPIRED",
    "KIND_REG_UPDATE",
    "AsyncResponseEvent",
    "DeregistrationEvent",
    "Event",
    "FirmwareUpdateEvent",
    "NotificationEvent",
    "RegistrationEvent",
]


class NotificationEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A value of a subscribed resource (spec §6)."""

    device_id: str
    endpoint_name: str
    path: str
    content_type: str  # MIME, wire-format.md "ct"
    payload: bytes
    max_age: int = 0

    kind = KIND_NOTIFICATION


class RegistrationEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A registration or a registration update (kind tells which)."""

    device_id: str
    endpoint_name: str
    endpoint_type: str
    queue_mode: bool
    resources: tuple[ResourceLink, ...]  # as the device record keeps them: no values
    update: bool = False

    @property
    def kind(self) -> int:
        return KIND_REG_UPDATE if self.update else KIND_REGISTRATION


class DeregistrationEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A de-registration, or an expired registration."""

    device_id: str
    endpoint_name: str
    expired: bool = False

    @property
    def kind(self) -> int:
        return KIND_REGISTRATIONS_EXPIRED if self.expired else KIND_DE_REGISTRATION


class AsyncResponseEvent(msgspec.Struct, frozen=True, kw_only=True):
    """The result of a device request or a subscription, for the requesting key only.

    wire-format.md: `payload`, `ct` and `max-age` are always sent (`payload` empty when the device returned
    nothing); `error` names a service-side outcome (REQUEST_EXPIRED, NOT_CONNECTED, TIMEOUT, …) and is set only
    when the request was not delivered. A device's own error answer is carried by `status` and `payload`.
    """

    async_id: str
    status: int
    payload: bytes = b""
    content_type: str = "text/plain"
    error: str | None = None
    max_age: int = 0
    # the device the request went to ("" when none): never on the wire (encode.py), it places the answer in that
    # device's sequence on a cursor channel (issue 34 #2: `device_seq`)
    device_id: str = ""

    kind = KIND_ASYNC_RESPONSE


class FirmwareUpdateEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A firmware campaign moved to another phase (`device_id` empty), or one of its devices to another deployment
    state (issue 33). Only channels that opted in (`cfg.include_firmware_updates`) and the console carry it."""

    campaign_id: str
    phase: str  # the campaign's phase when this happened
    device_id: str = ""
    endpoint_name: str = ""
    deployment_state: str = ""  # Pelion's campaign-device-metadata state
    reason: str = ""  # why: the campaign's autostop_reason, or the device's (a failure names its Update Result)

    kind = KIND_FIRMWARE_UPDATE


Event = NotificationEvent | RegistrationEvent | DeregistrationEvent | AsyncResponseEvent | FirmwareUpdateEvent
