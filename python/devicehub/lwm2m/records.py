"""The held registration ↔ its stored record: the one place the LwM2M layer says how one becomes the other."""

from __future__ import annotations

import msgspec

from devicehub.domain.model import ObservationRecord, Registration, ResourceLink
from devicehub.lwm2m.links import shared_link


def _stored(link: ResourceLink) -> ResourceLink:
    """The link as a registration record keeps it: its `;v=` value went to the snapshot (a shared link when so)."""
    return link if link.value is None else shared_link(link.path, link.rt, link.ct, link.obs, link.iface, link.aobs)


def record_of(registration: Registration) -> Registration:
    """The registration as it is stored: without its links' values (the registration itself when none has one)."""
    if all(link.value is None for link in registration.links):
        return registration
    return msgspec.structs.replace(registration, links=tuple(_stored(link) for link in registration.links))


def registration_of(record: Registration) -> Registration:
    """A stored registration as it is held: its links, decoded afresh per record, shared again as parsed links are
    (issue 16 #1)."""
    links = tuple(shared_link(k.path, k.rt, k.ct, k.obs, k.iface, k.aobs) for k in record.links)
    return msgspec.structs.replace(record, links=links)


def observation_record(
    device_id: str, token: bytes, path: str, auto: bool, last_seq: int | None, last_at: float
) -> ObservationRecord:
    return ObservationRecord(token=token, device_id=device_id, path=path, auto=auto, last_seq=last_seq, last_at=last_at)
