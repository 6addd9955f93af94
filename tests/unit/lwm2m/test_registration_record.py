"""The stored form of a registration keeps the transport it was made over (a restarted node must not reach a TCP
device over UDP); records stored before the field existed decode with its default, UDP."""

from __future__ import annotations

import dataclasses

import msgspec

from devicehub.domain.model import RegistrationRecord
from devicehub.domain.registration import TCP, UDP, Registration
from devicehub.lwm2m.records import record_of, registration_of


def registration(transport: str) -> Registration:
    return Registration(
        account_id="acc",
        device_id="dev-1",
        endpoint_name="ep-1",
        endpoint_type="",
        lifetime=60,
        binding="T",
        lwm2m_version="1.1",
        links=(),
        address=("127.0.0.1", 40_000),
        registered_at=100.0,
        updated_at=100.0,
        transport=transport,
    )


def test_a_tcp_registration_is_stored_and_restored_as_made_over_tcp() -> None:
    """The record written for restarts and other nodes says TCP, and the registration taken up from it too."""
    stored = msgspec.msgpack.encode(record_of(registration(TCP), expires_at=253.0))
    restored = registration_of(msgspec.msgpack.decode(stored, type=RegistrationRecord))
    assert restored.transport == TCP and restored == registration(TCP)


def test_a_record_stored_before_the_transport_field_decodes_as_udp() -> None:
    """A blob without `transport` (written by an older node) still decodes: its registration was made over UDP."""
    older = msgspec.to_builtins(record_of(registration(UDP), expires_at=253.0))
    del older["transport"]
    record = msgspec.msgpack.decode(msgspec.msgpack.encode(older), type=RegistrationRecord)
    assert registration_of(record).transport == UDP


def test_an_edge_childs_record_keeps_the_gateway_it_registered_through() -> None:
    """`gw=` is stored: the node that takes the child's registration up knows which identity may continue it."""
    child = dataclasses.replace(registration(UDP), gateway="edge-gateway-00001", secure=True)
    stored = msgspec.msgpack.encode(record_of(child, expires_at=253.0))
    assert registration_of(msgspec.msgpack.decode(stored, type=RegistrationRecord)) == child
