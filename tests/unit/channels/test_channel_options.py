"""Channel serialization bodies (wire-format.md "Channel serialization", spec §2.5, §6)."""

from __future__ import annotations

import pytest

from devicehub.channels.options import DEFAULT_CHUNK_SIZE, ChannelOptions
from devicehub.errors import ValidationFailed


def test_absent_serialization_gives_the_defaults() -> None:
    options = ChannelOptions.from_wire(None)
    assert options == ChannelOptions()
    assert options.to_wire() == {
        "type": "v2",
        "max_chunk_size": DEFAULT_CHUNK_SIZE,
        "cfg": {
            "include_timestamp": False,
            "include_uid": False,
            "include_original_ep": False,
            "deregistrations_as_object": False,
            "use_endpoint_name": False,
        },
    }


def test_booleans_and_ints_are_accepted_as_strings() -> None:
    options = ChannelOptions.from_wire(
        {"type": "v2", "max_chunk_size": "100", "cfg": {"include_timestamp": "true", "use_endpoint_name": "False"}}
    )
    assert options.max_chunk_size == 100
    assert options.include_timestamp is True
    assert options.use_endpoint_name is False


def test_normalised_form_round_trips() -> None:
    options = ChannelOptions(max_chunk_size=20_000, include_uid=True, deregistrations_as_object=True)
    assert ChannelOptions.from_wire(options.to_wire()) == options
    assert ChannelOptions.from_stored(options.to_wire()) == options


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "v1"}, "serialization.type"),
        ({"max_chunk_size": 99}, "serialization.max_chunk_size"),
        ({"max_chunk_size": 20_001}, "serialization.max_chunk_size"),
        ({"max_chunk_size": "lots"}, "serialization.max_chunk_size"),
        ({"max_chunk_size": True}, "serialization.max_chunk_size"),
        ({"cfg": {"include_uid": "yes"}}, "serialization.cfg.include_uid"),
        ({"cfg": {"include_uid": 1}}, "serialization.cfg.include_uid"),
        ({"cfg": {"colour": True}}, "serialization.cfg.colour"),
        ({"cfg": []}, "serialization.cfg"),
        ({"chunk": 100}, "serialization.chunk"),
        ("v2", "serialization"),
    ],
)
def test_bad_values_and_unknown_keys_are_400_naming_the_field(body: object, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        ChannelOptions.from_wire(body)
    assert caught.value.status == 400
    assert [f.name for f in caught.value.fields] == [field]


def test_chunk_size_bounds_are_inclusive() -> None:
    assert ChannelOptions.from_wire({"max_chunk_size": 100}).max_chunk_size == 100
    assert ChannelOptions.from_wire({"max_chunk_size": 20_000}).max_chunk_size == 20_000


def test_unreadable_stored_options_fall_back_to_defaults() -> None:
    assert ChannelOptions.from_stored({"type": "v9"}) == ChannelOptions()
    assert ChannelOptions.from_stored({}) == ChannelOptions()
