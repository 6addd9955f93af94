"""What a registration makes of a device's record and of its registration event: the resource entries a fleet
shares, the record written for a full registration, and whether an unchanged one need be written at all."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from devicehub.domain.content_formats import mime_for
from devicehub.domain.events import RegistrationEvent
from devicehub.domain.model import Device, Registration, ReportedValue, ResourceLink
from devicehub.interning import InternTable

# `PUT /v3/devices/{id}` (Pelion DeviceDataPutRequest): fields the application owns; they outlive registrations
DIRECTORY_FIELDS = ("name", "description", "custom_attributes", "auto_update", "ca_id", "device_key")


# the device records of a fleet share their equal resources, as the links they come from do; a device keeps a link
# without its value (the snapshot holds it) and without its auto-observe token (`aobs` makes it observable)
_RESOURCES: InternTable[ResourceLink] = InternTable(ResourceLink)


def resources_of(links: Sequence[ResourceLink]) -> tuple[ResourceLink, ...]:
    return tuple(
        _RESOURCES.get((link.path, link.rt, link.ct, link.obs or link.aobs is not None, link.iface))
        for link in links
        if not link.deleted
    )


def device_record(
    registration: Registration,
    previous: Device | None,
    now: float,
    host_gateway: str,
    resources: tuple[ResourceLink, ...],
) -> Device:
    device = Device(
        id=registration.device_id,
        account_id=registration.account_id,
        endpoint_name=registration.endpoint_name,
        endpoint_type=registration.endpoint_type,
        state="registered",
        queue_mode=registration.queue_mode,
        lifetime=registration.lifetime,
        resources=resources,
        created_at=previous.created_at if previous else now,
        updated_at=now,
        last_seen_at=now,
        host_gateway=host_gateway,
    )
    if previous is not None:  # what applications set in the directory outlives registrations
        device = msgspec.structs.replace(device, **{f: getattr(previous, f) for f in DIRECTORY_FIELDS})
    return device


def registration_event(device: Device) -> RegistrationEvent:
    return RegistrationEvent(
        device_id=device.id,
        endpoint_name=device.endpoint_name,
        endpoint_type=device.endpoint_type,
        queue_mode=device.queue_mode,
        resources=device.resources,
    )


def unchanged_record(device: Device, registration: Registration, resources: tuple[ResourceLink, ...]) -> bool:
    """Would storing the registration (whose links give `resources`) change nothing in the device record but its
    times?"""
    return (
        device.state == "registered"
        and not registration.gateway  # a child's gateway is looked up again (it may have registered since)
        and device.endpoint_type == registration.endpoint_type
        and device.queue_mode == registration.queue_mode
        and device.lifetime == registration.lifetime
        and device.resources == resources
    )


def link_values(links: Sequence[ResourceLink], now: float) -> list[tuple[str, ReportedValue]]:
    """spec §2.4: the values a register message announces are reported values, (path, value) at `now`."""
    return [
        (
            link.path,
            ReportedValue(
                value=link.value, content_type=mime_for(link.ct if link.ct is not None else 0), reported_at=now
            ),
        )
        for link in links
        if link.value is not None and not link.deleted
    ]
