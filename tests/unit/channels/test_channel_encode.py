"""Event encoding per channel options (wire-format.md NotificationMessage and serialization cfg)."""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from devicehub.channels.encode import EventEncoder
from devicehub.channels.options import ChannelOptions
from devicehub.domain.events import (
    AsyncResponseEvent,
    DeregistrationEvent,
    NotificationEvent,
    RegistrationEvent,
)
from devicehub.domain.model import ResourceLink

DEVICE = "0123456789abcdef0123456789abcdef"
NOTE = NotificationEvent(
    device_id=DEVICE, endpoint_name="node-1", path="/3303/0/5700", content_type="text/plain", payload=b"21.5"
)
REG = RegistrationEvent(
    device_id=DEVICE,
    endpoint_name="node-1",
    endpoint_type="sensor",
    queue_mode=True,
    resources=(ResourceLink(path="/3/0/0", rt="x", obs=True, iface="core"), ResourceLink(path="/3303/0/5700")),
)


def encode(event: Any, options: ChannelOptions, uid: str | None = "u-1") -> Any:
    return msgspec.json.decode(EventEncoder().encode(event, options, 1_800_000_000_123, uid))


def test_notification_default_shape_has_base64_payload_and_no_optional_fields() -> None:
    assert encode(NOTE, ChannelOptions()) == {
        "ep": DEVICE,
        "path": "/3303/0/5700",
        "ct": "text/plain",
        "payload": base64.b64encode(b"21.5").decode(),
        "max-age": 0,
    }


def test_notification_with_every_option() -> None:
    options = ChannelOptions(include_timestamp=True, include_uid=True, include_original_ep=True, use_endpoint_name=True)
    assert encode(NOTE, options) == {
        "ep": "node-1",
        "path": "/3303/0/5700",
        "ct": "text/plain",
        "payload": "MjEuNQ==",
        "max-age": 0,
        "timestamp": 1_800_000_000_123,
        "uid": "u-1",
        "original-ep": "node-1",
    }


def test_registration_shape_and_resources() -> None:
    assert encode(REG, ChannelOptions()) == {
        "ep": DEVICE,
        "original-ep": "node-1",
        "ept": "sensor",
        "q": True,
        "resources": [{"path": "/3/0/0", "rt": "x", "obs": True, "if": "core"}, {"path": "/3303/0/5700", "obs": False}],
    }
    stamped = encode(REG, ChannelOptions(include_timestamp=True, use_endpoint_name=True))
    assert stamped["timestamp"] == 1_800_000_000_123
    assert stamped["ep"] == "node-1"


def test_deregistration_is_a_string_or_an_object() -> None:
    gone = DeregistrationEvent(device_id=DEVICE, endpoint_name="node-1")
    assert encode(gone, ChannelOptions()) == DEVICE
    assert encode(gone, ChannelOptions(use_endpoint_name=True)) == "node-1"
    assert encode(
        gone, ChannelOptions(deregistrations_as_object=True, include_timestamp=True, include_original_ep=True)
    ) == {"ep": DEVICE, "original-ep": "node-1", "timestamp": 1_800_000_000_123}


def test_async_response_always_carries_payload_ct_and_max_age() -> None:
    ok = AsyncResponseEvent(async_id="a-1", status=200, payload=b"\x00\x01", content_type="text/plain", max_age=60)
    assert encode(ok, ChannelOptions()) == {
        "id": "a-1",
        "status": 200,
        "payload": "AAE=",
        "ct": "text/plain",
        "max-age": 60,
    }
    # issue 11: an empty device answer still sends `payload` (clients test for the key to see completion)
    empty = AsyncResponseEvent(async_id="a-0", status=200)
    assert encode(empty, ChannelOptions()) == {
        "id": "a-0",
        "status": 200,
        "payload": "",
        "ct": "text/plain",
        "max-age": 0,
    }
    failed = AsyncResponseEvent(async_id="a-2", status=504, error="TIMEOUT")
    assert encode(failed, ChannelOptions(include_uid=True)) == {
        "id": "a-2",
        "status": 504,
        "payload": "",
        "ct": "text/plain",
        "max-age": 0,
        "error": "TIMEOUT",
        "uid": "u-1",
    }


def test_every_event_kind_keeps_its_required_keys_when_values_are_empty_or_default() -> None:
    """wire-format.md NotificationMessage: omit-defaults must never drop a key the format always sends."""
    options = ChannelOptions()
    quiet = NotificationEvent(
        device_id=DEVICE, endpoint_name="n", path="/1/0/1", content_type="text/plain", payload=b""
    )
    assert set(encode(quiet, options)) == {"ep", "path", "ct", "payload", "max-age"}
    bare = RegistrationEvent(device_id=DEVICE, endpoint_name="n", endpoint_type="", queue_mode=False, resources=())
    for event in (bare, msgspec.structs.replace(bare, update=True)):
        assert encode(event, options) == {"ep": DEVICE, "original-ep": "n", "ept": "", "q": False, "resources": []}
    plain = RegistrationEvent(
        device_id=DEVICE, endpoint_name="n", endpoint_type="t", queue_mode=False, resources=(ResourceLink(path="/1"),)
    )
    assert encode(plain, options)["resources"] == [{"path": "/1", "obs": False}]
    for expired in (False, True):
        gone = DeregistrationEvent(device_id=DEVICE, endpoint_name="n", expired=expired)
        assert encode(gone, options) == DEVICE
        assert encode(gone, ChannelOptions(deregistrations_as_object=True)) == {"ep": DEVICE}
    assert set(encode(AsyncResponseEvent(async_id="x", status=404), options)) == {
        "id",
        "status",
        "payload",
        "ct",
        "max-age",
    }


def test_uid_is_sent_only_when_configured() -> None:
    assert "uid" not in encode(NOTE, ChannelOptions(include_uid=False))
    assert encode(NOTE, ChannelOptions(include_uid=True), uid="u-9")["uid"] == "u-9"


def test_a_resource_shows_its_content_format_by_mime_name_in_the_wire_key_order() -> None:
    """The one link class keeps `ct` as a number; the wire shows its MIME name, keys in wire-format.md's order."""
    event = RegistrationEvent(
        device_id=DEVICE,
        endpoint_name="n",
        endpoint_type="t",
        queue_mode=False,
        resources=(ResourceLink("/3/0/0", "r", 42, True, "core"), ResourceLink("/3/0/1", ct=99)),
    )
    assert EventEncoder().encode(event, ChannelOptions(), 0, None) == (
        b'{"ep":"' + DEVICE.encode() + b'","original-ep":"n","ept":"t","q":false,"resources":['
        b'{"path":"/3/0/0","rt":"r","ct":"application/octet-stream","obs":true,"if":"core"},'
        b'{"path":"/3/0/1","ct":"application/vnd.oma.lwm2m+tlv","obs":false}]}'
    )
