"""Events to wire bytes (wire-format.md NotificationMessage), once per event and channel options, at push time.

The Rust queue stores these bytes and joins them into the batch body, so the options in force when an event is
queued decide its shape (the `timestamp` is the queueing time, spec §6 rule 5).
"""

from __future__ import annotations

import msgspec

from devicehub.channels.options import ChannelOptions
from devicehub.domain.content_formats import mime_for
from devicehub.domain.events import (
    AsyncResponseEvent,
    DeregistrationEvent,
    Event,
    FirmwareUpdateEvent,
    NotificationEvent,
    RegistrationEvent,
)
from devicehub.domain.model import ResourceLink
from devicehub.interning import InternTable


class _Notification(
    msgspec.Struct, kw_only=True, omit_defaults=True, rename={"max_age": "max-age", "original_ep": "original-ep"}
):
    ep: str
    path: str
    ct: str
    payload: bytes  # msgspec writes bytes as base64 (wire-format.md "Values travel base64")
    max_age: int
    timestamp: int | None = None
    uid: str | None = None
    original_ep: str | None = None


class _Registration(msgspec.Struct, kw_only=True, omit_defaults=True, rename={"original_ep": "original-ep"}):
    ep: str
    original_ep: str
    ept: str
    q: bool
    resources: list[msgspec.Raw]  # each a resource object, encoded once per distinct link (_resource_json)
    timestamp: int | None = None
    uid: str | None = None


class _Deregistration(msgspec.Struct, kw_only=True, omit_defaults=True, rename={"original_ep": "original-ep"}):
    ep: str
    original_ep: str | None = None
    timestamp: int | None = None
    uid: str | None = None


class _AsyncResponse(msgspec.Struct, kw_only=True, omit_defaults=True, rename={"max_age": "max-age"}):
    # wire-format.md: id, status, payload, ct and max-age always (no defaults, so never omitted); error on failure
    id: str
    status: int
    payload: bytes
    ct: str
    max_age: int
    error: str | None = None
    uid: str | None = None


class _FirmwareUpdate(msgspec.Struct, kw_only=True, omit_defaults=True, rename={"original_ep": "original-ep"}):
    # issue 33, beyond wire-format.md (opt-in): `ep` only when a device changed; `reason` when there is one
    campaign: str
    phase: str
    ep: str | None = None
    original_ep: str | None = None
    deployment_state: str | None = None
    reason: str | None = None
    timestamp: int | None = None
    uid: str | None = None


def _encode_resource(link: ResourceLink) -> msgspec.Raw:
    """wire-format.md's resource object: `ct` as its MIME name, `iface` as `if`, `obs` always, other unset keys
    left out."""
    fields: dict[str, object] = {"path": link.path}
    if link.rt is not None:
        fields["rt"] = link.rt
    if link.ct is not None:
        fields["ct"] = mime_for(link.ct)
    fields["obs"] = link.obs
    if link.iface is not None:
        fields["if"] = link.iface
    return msgspec.Raw(msgspec.json.encode(fields))


# a fleet's registration events list the same few resources: each is encoded once (issue 16 #1's sharing)
_RESOURCE_JSON: InternTable[msgspec.Raw] = InternTable(_encode_resource)


def _resource_json(link: ResourceLink) -> msgspec.Raw:
    return _RESOURCE_JSON.get((link,))


class EventEncoder:
    """Encodes one event for one channel's options; the msgspec encoder is built once and reused."""

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder()

    def encode(self, event: Event, options: ChannelOptions, queued_at_ms: int, uid: str | None) -> bytes:
        """`uid` is the event's identity (the same for every channel it goes to); sent only with include_uid."""
        uid = uid if options.include_uid else None
        stamp = queued_at_ms if options.include_timestamp else None
        if isinstance(event, NotificationEvent):
            return self._encoder.encode(
                _Notification(
                    ep=event.endpoint_name if options.use_endpoint_name else event.device_id,
                    path=event.path,
                    ct=event.content_type,
                    payload=event.payload,
                    max_age=event.max_age,
                    timestamp=stamp,
                    uid=uid,
                    original_ep=event.endpoint_name if options.include_original_ep else None,
                )
            )
        if isinstance(event, RegistrationEvent):
            return self._encoder.encode(
                _Registration(
                    ep=event.endpoint_name if options.use_endpoint_name else event.device_id,
                    original_ep=event.endpoint_name,
                    ept=event.endpoint_type,
                    q=event.queue_mode,
                    resources=[_resource_json(r) for r in event.resources],
                    timestamp=stamp,
                    uid=uid,
                )
            )
        if isinstance(event, DeregistrationEvent):
            ep = event.endpoint_name if options.use_endpoint_name else event.device_id
            if not options.deregistrations_as_object and not options.include_cursor:
                return self._encoder.encode(ep)
            return self._encoder.encode(
                _Deregistration(
                    ep=ep,
                    original_ep=event.endpoint_name if options.include_original_ep else None,
                    timestamp=stamp,
                    uid=uid,
                )
            )
        if isinstance(event, FirmwareUpdateEvent):
            device = event.device_id or None
            return self._encoder.encode(
                _FirmwareUpdate(
                    campaign=event.campaign_id,
                    phase=event.phase,
                    ep=(event.endpoint_name if options.use_endpoint_name else event.device_id) if device else None,
                    original_ep=event.endpoint_name or None,
                    deployment_state=event.deployment_state or None,
                    reason=event.reason or None,
                    timestamp=stamp,
                    uid=uid,
                )
            )
        return self._encoder.encode(_async_response(event, uid))


def _async_response(event: AsyncResponseEvent, uid: str | None) -> _AsyncResponse:
    return _AsyncResponse(
        id=event.async_id,
        status=event.status,
        payload=event.payload,
        ct=event.content_type,
        max_age=event.max_age,
        error=event.error,
        uid=uid,
    )
