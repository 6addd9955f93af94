"""The OMA-TLV binding in devicehub._core: TlvNode, tlv_decode/tlv_encode and the value helpers.

Byte strings are the worked examples of lwm2m-device-side.md §6; the codec itself is tested in
rust/codec/src/tlv/tests.rs, these tests check the conversions and errors the binding adds.
"""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devicehub._core import (
    TLV_MULTIPLE_RESOURCE,
    TLV_OBJECT_INSTANCE,
    TLV_RESOURCE,
    TLV_RESOURCE_INSTANCE,
    CoreError,
    TlvError,
    TlvNode,
    tlv_bool,
    tlv_decode,
    tlv_encode,
    tlv_float,
    tlv_int,
    tlv_objlnk,
    tlv_read_bool,
    tlv_read_float,
    tlv_read_int,
    tlv_read_objlnk,
)

WAKAAMA_31024_10 = bytes.fromhex("080a0b c10114 c403c1f00000 c005")
POWER_SOURCES = bytes.fromhex("86 06 41 00 01 41 01 05")


def test_kind_constants_are_the_type_byte_bits() -> None:
    assert (TLV_OBJECT_INSTANCE, TLV_RESOURCE_INSTANCE, TLV_MULTIPLE_RESOURCE, TLV_RESOURCE) == (0, 1, 2, 3)


def test_decode_wakaama_object_instance() -> None:
    [instance] = tlv_decode(WAKAAMA_31024_10)
    assert (instance.kind, instance.id, instance.value) == (TLV_OBJECT_INSTANCE, 10, b"")
    assert [(c.kind, c.id, c.value) for c in instance.children] == [
        (TLV_RESOURCE, 1, b"\x14"),
        (TLV_RESOURCE, 3, bytes.fromhex("c1f00000")),
        (TLV_RESOURCE, 5, b""),
    ]
    assert tlv_read_int(instance.children[0].value) == 20
    assert tlv_read_float(instance.children[1].value) == -30.0


def test_encode_builds_the_same_bytes_from_constructed_nodes() -> None:
    tree = TlvNode(
        TLV_OBJECT_INSTANCE,
        10,
        children=[
            TlvNode(TLV_RESOURCE, 1, tlv_int(20)),
            TlvNode(TLV_RESOURCE, 3, tlv_float(-30.0)),
            TlvNode(TLV_RESOURCE, 5, b""),
        ],
    )
    assert tlv_encode([tree]) == WAKAAMA_31024_10
    assert tlv_decode(WAKAAMA_31024_10) == [tree]


@pytest.mark.parametrize(
    ("data", "nodes"),
    [
        (bytes.fromhex("c80014") + b"Open Mobile Alliance", [TlvNode(TLV_RESOURCE, 0, b"Open Mobile Alliance")]),
        (
            POWER_SOURCES,
            [
                TlvNode(
                    TLV_MULTIPLE_RESOURCE,
                    6,
                    children=(TlvNode(TLV_RESOURCE_INSTANCE, 0, b"\x01"), TlvNode(TLV_RESOURCE_INSTANCE, 1, b"\x05")),
                )
            ],
        ),
        (bytes.fromhex("e4164441500000"), [TlvNode(TLV_RESOURCE, 5700, tlv_float(13.0))]),
        (bytes.fromhex("e3164543656c"), [TlvNode(TLV_RESOURCE, 5701, b"Cel")]),
        (bytes.fromhex("c1012b"), [TlvNode(TLV_RESOURCE, 1, tlv_int(43))]),
        (bytes.fromhex("410001410105"), [TlvNode(TLV_RESOURCE_INSTANCE, 0, b"\x01"), TlvNode(1, 1, b"\x05")]),
        (b"", []),
    ],
)
def test_spec_examples_decode_and_encode_byte_exact(data: bytes, nodes: list[TlvNode]) -> None:
    assert tlv_decode(data) == nodes
    assert tlv_encode(nodes) == data


def test_nodes_are_hashable_values() -> None:
    a = tlv_decode(POWER_SOURCES)[0]
    b = tlv_decode(POWER_SOURCES)[0]
    assert a == b and a is not b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != TlvNode(TLV_MULTIPLE_RESOURCE, 7)
    assert a != "not a node"


def test_repr_shows_the_tree() -> None:
    [node] = tlv_decode(POWER_SOURCES)
    assert repr(node) == (
        "TlvNode(kind=2, id=6, children=[TlvNode(kind=1, id=0, value=b'\\x01'), TlvNode(kind=1, id=1, value=b'\\x05')])"
    )


def test_nodes_are_frozen() -> None:
    node = TlvNode(TLV_RESOURCE, 1, b"x")
    with pytest.raises(AttributeError):
        node.id = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    "data",
    [b"\xc8", b"\xe0\x16", b"\xc1\x01", bytes.fromhex("08000200 00"), bytes.fromhex("8206c000")],
    ids=["truncated-length", "truncated-id", "length-past-end", "instance-in-instance", "resource-in-multiple"],
)
def test_malformed_input_raises_tlv_error(data: bytes) -> None:
    with pytest.raises(TlvError):
        tlv_decode(data)


def test_tlv_error_is_a_core_value_error() -> None:
    assert issubclass(TlvError, CoreError)
    assert issubclass(TlvError, ValueError)


@pytest.mark.parametrize(
    ("kind", "id", "value", "children"),
    [
        (4, 0, b"", None),
        (-1, 0, b"", None),
        (TLV_RESOURCE, 65536, b"", None),
        (TLV_RESOURCE, -1, b"", None),
        (TLV_OBJECT_INSTANCE, 0, b"x", None),
        (TLV_RESOURCE, 0, b"", [TlvNode(TLV_RESOURCE_INSTANCE, 0)]),
        (TLV_OBJECT_INSTANCE, 0, b"", [TlvNode(TLV_RESOURCE_INSTANCE, 0)]),
        (TLV_MULTIPLE_RESOURCE, 0, b"", [TlvNode(TLV_RESOURCE, 0)]),
    ],
)
def test_invalid_nodes_are_refused_at_construction(
    kind: int, id: int, value: bytes, children: list[TlvNode] | None
) -> None:
    with pytest.raises(TlvError):
        TlvNode(kind, id, value, children)


def test_encode_refuses_a_value_over_24_bits() -> None:
    with pytest.raises(TlvError, match="exceeds"):
        tlv_encode([TlvNode(TLV_RESOURCE, 0, bytes(16_777_216))])


def test_encode_accepts_any_sequence_of_nodes() -> None:
    node = TlvNode(TLV_RESOURCE, 1, b"+")
    assert tlv_encode((node,)) == tlv_encode([node]) == b"\xc1\x01+"
    with pytest.raises(TypeError):
        tlv_encode([b"\xc1\x01+"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("value", "width"),
    [(0, 1), (-128, 1), (127, 1), (128, 2), (-129, 2), (32768, 4), (-(2**31), 4), (2**31, 8), (2**63 - 1, 8)],
)
def test_int_uses_the_shortest_width(value: int, width: int) -> None:
    data = tlv_int(value)
    assert len(data) == width
    assert tlv_read_int(data) == value


def test_int_reads_anjay_time_and_rejects_odd_widths() -> None:
    assert tlv_read_int(bytes.fromhex("6b036a58")) == 0x6B036A58
    assert tlv_int(0x6B036A58).hex() == "6b036a58"
    with pytest.raises(TlvError):
        tlv_read_int(b"\x00\x00\x00")
    with pytest.raises(TlvError):
        tlv_int(2**63)


def test_float_is_binary32_only_when_exact() -> None:
    assert tlv_float(13.0).hex() == "41500000"
    assert len(tlv_float(0.1)) == 8
    assert tlv_read_float(tlv_float(0.1)) == 0.1
    assert math.isnan(tlv_read_float(tlv_float(math.nan)))
    with pytest.raises(TlvError):
        tlv_read_float(b"\x00" * 5)


def test_bool_and_objlnk() -> None:
    assert tlv_bool(True) == b"\x01" and tlv_bool(False) == b"\x00"
    assert tlv_read_bool(b"\x01") is True and tlv_read_bool(b"\x00") is False
    for bad in (b"\x02", b"", b"\x00\x01"):
        with pytest.raises(TlvError):
            tlv_read_bool(bad)
    assert tlv_objlnk(3, 0).hex() == "00030000"
    assert tlv_read_objlnk(bytes.fromhex("00030000")) == (3, 0)
    with pytest.raises(TlvError):
        tlv_objlnk(65536, 0)
    with pytest.raises(TlvError):
        tlv_read_objlnk(b"\x00\x03")


@given(st.binary(max_size=256))
def test_decode_of_arbitrary_bytes_gives_nodes_or_tlv_error(data: bytes) -> None:
    try:
        nodes = tlv_decode(data)
    except TlvError:
        return
    assert tlv_decode(tlv_encode(nodes)) == nodes


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_int_round_trips(value: int) -> None:
    assert tlv_read_int(tlv_int(value)) == value
