"""The stored form of a registration keeps the transport it was made over (a restarted node must not reach a TCP
device over UDP); records stored before the field existed decode with its default, UDP."""

from __future__ import annotations

import msgspec

from devicehub.domain.model import Registration, ResourceLink
from devicehub.domain.registration import TCP, UDP
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
        host="127.0.0.1",
        port=40_000,
        registered_at=100.0,
        updated_at=100.0,
        expires_at=253.0,
        transport=transport,
    )


def test_a_tcp_registration_is_stored_and_restored_as_made_over_tcp() -> None:
    """The record written for restarts and other nodes says TCP, and the registration taken up from it too."""
    stored = msgspec.msgpack.encode(record_of(registration(TCP)))
    restored = registration_of(msgspec.msgpack.decode(stored, type=Registration))
    assert restored.transport == TCP and restored == registration(TCP)


def test_a_record_stored_before_the_transport_field_decodes_as_udp() -> None:
    """A blob without `transport` (written by an older node) still decodes: its registration was made over UDP."""
    older = msgspec.to_builtins(record_of(registration(UDP)))
    del older["transport"]
    record = msgspec.msgpack.decode(msgspec.msgpack.encode(older), type=Registration)
    assert registration_of(record).transport == UDP


def test_an_edge_childs_record_keeps_the_gateway_it_registered_through() -> None:
    """`gw=` is stored: the node that takes the child's registration up knows which identity may continue it."""
    child = msgspec.structs.replace(registration(UDP), gateway="edge-gateway-00001", secure=True)
    stored = msgspec.msgpack.encode(record_of(child))
    assert registration_of(msgspec.msgpack.decode(stored, type=Registration)) == child


def test_the_stored_record_of_a_registration_keeps_its_links_without_their_values() -> None:
    """`;v=` values go to the snapshot: the record keeps the link, the held registration its value."""
    valued = msgspec.structs.replace(
        registration(UDP), links=(ResourceLink("/3/0/0", value=b"ARM"), ResourceLink("/3/0"))
    )
    record = record_of(valued)
    assert record.links == (ResourceLink("/3/0/0"), ResourceLink("/3/0")) and valued.links[0].value == b"ARM"
    assert record_of(record) is record  # nothing to take out: the registration itself is stored
