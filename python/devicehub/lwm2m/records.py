"""The held registration ↔ its stored record: the one place the LwM2M layer converts between the two forms."""

from __future__ import annotations

from devicehub.domain.model import ObservationRecord, RegistrationRecord, ResourceLink
from devicehub.domain.registration import Registration
from devicehub.lwm2m.links import shared_link


def _stored(link: ResourceLink) -> ResourceLink:
    """The link as a registration record keeps it: its `;v=` value went to the snapshot (a shared link when so)."""
    return link if link.value is None else shared_link(link.path, link.rt, link.ct, link.obs, link.iface, link.aobs)


def record_of(registration: Registration, expires_at: float) -> RegistrationRecord:
    return RegistrationRecord(
        device_id=registration.device_id,
        account_id=registration.account_id,
        endpoint_name=registration.endpoint_name,
        endpoint_type=registration.endpoint_type,
        lifetime=registration.lifetime,
        binding=registration.binding,
        lwm2m_version=registration.lwm2m_version,
        links=tuple(_stored(link) for link in registration.links),
        host=registration.address[0],
        port=registration.address[1],
        registered_at=registration.registered_at,
        updated_at=registration.updated_at,
        expires_at=expires_at,
        queue_mode=registration.queue_mode,
        domain=registration.domain,
        secure=registration.secure,
        transport=registration.transport,
        gateway=registration.gateway,
    )


def registration_of(record: RegistrationRecord) -> Registration:
    return Registration(
        account_id=record.account_id,
        device_id=record.device_id,
        endpoint_name=record.endpoint_name,
        endpoint_type=record.endpoint_type,
        lifetime=record.lifetime,
        binding=record.binding,
        lwm2m_version=record.lwm2m_version,
        # decoded afresh per record: shared again as parsed links are (issue 16 #1)
        links=tuple(shared_link(k.path, k.rt, k.ct, k.obs, k.iface, k.aobs) for k in record.links),
        address=(record.host, record.port),
        registered_at=record.registered_at,
        updated_at=record.updated_at,
        queue_mode=record.queue_mode,
        domain=record.domain,
        secure=record.secure,
        transport=record.transport,
        gateway=record.gateway,
    )


def observation_record(
    device_id: str, token: bytes, path: str, auto: bool, last_seq: int | None, last_at: float
) -> ObservationRecord:
    return ObservationRecord(token=token, device_id=device_id, path=path, auto=auto, last_seq=last_seq, last_at=last_at)
