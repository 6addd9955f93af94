"""Content-format names and payload decoding (lwm2m-device-side.md §5 examples, §6 TLV)."""

import json
import math

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from devicehub.domain.content_formats import (
    CBOR,
    JSON,
    LINK_FORMAT,
    LWM2M_JSON,
    OCTET_STREAM,
    SENML_CBOR,
    SENML_JSON,
    TEXT,
    TLV,
    canonical_cf,
    cf_for,
    mime_for,
)
from devicehub.lwm2m.content import ContentError, decode_values, encode_text_value

ALL_CFS = [None, TEXT, LINK_FORMAT, OCTET_STREAM, JSON, CBOR, SENML_JSON, SENML_CBOR, TLV, LWM2M_JSON, 99, 1542, 7]

# ---- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cf", "mime"),
    [
        (0, "text/plain"),
        (40, "application/link-format"),
        (42, "application/octet-stream"),
        (50, "application/json"),
        (60, "application/cbor"),
        (110, "application/senml+json"),
        (112, "application/senml+cbor"),
        (11542, "application/vnd.oma.lwm2m+tlv"),
        (11543, "application/vnd.oma.lwm2m+json"),
    ],
)
def test_mime_names_round_trip(cf: int, mime: str) -> None:
    assert mime_for(cf) == mime
    assert cf_for(mime) == cf


@pytest.mark.parametrize(("legacy", "cf"), [(99, TLV), (1542, TLV), (1543, LWM2M_JSON), (1541, TEXT), (1544, 42)])
def test_legacy_numbers_name_their_registered_format(legacy: int, cf: int) -> None:
    assert canonical_cf(legacy) == cf
    assert mime_for(legacy) == mime_for(cf)


def test_unknown_numbers_and_names() -> None:
    assert mime_for(12345) == "application/octet-stream"
    assert cf_for("application/x-unknown") is None
    assert cf_for("Text/Plain; charset=utf-8") == TEXT


# ---- §5 examples -----------------------------------------------------------------------------


def test_wakaama_lwm2m_json() -> None:
    payload = b'{"bn":"/31024/10/","e":[{"n":"1","v":20},{"n":"3","v":-30.0},{"n":"5","sv":""}]}'
    values = decode_values(LWM2M_JSON, payload, "/31024/10")
    assert values == {"/31024/10/1": 20, "/31024/10/3": -30.0, "/31024/10/5": ""}
    assert type(values["/31024/10/1"]) is int and type(values["/31024/10/3"]) is float


def test_lwm2m_json_booleans_objlnks_and_legacy_number() -> None:
    payload = b'{"bn":"/3/0/","e":[{"n":"21","bv":true},{"n":"22","ov":"3:0"}]}'
    assert decode_values(1543, payload, "/3/0") == {"/3/0/21": True, "/3/0/22": "3:0"}


def test_lwm2m_json_without_bn_is_relative_to_the_read_path() -> None:
    assert decode_values(LWM2M_JSON, b'{"e":[{"n":"6/1","v":5}]}', "/3/0") == {"/3/0/6/1": 5}


def test_wakaama_senml_json() -> None:
    payload = b'[{"bn":"/31024/10/","n":"1","v":20},{"n":"3","v":-30.0},{"n":"5","vs":""}]'
    assert decode_values(SENML_JSON, payload, "/31024/10") == {
        "/31024/10/1": 20,
        "/31024/10/3": -30.0,
        "/31024/10/5": "",
    }


def test_anjay_senml_json_splits_bn_and_n_differently() -> None:
    payload = b'[{"bn":"/3303/0","n":"/5601","v":13},{"n":"/5700","v":13.5},{"n":"/5701","vs":"Cel"}]'
    assert decode_values(SENML_JSON, payload, "/3303/0") == {
        "/3303/0/5601": 13,
        "/3303/0/5700": 13.5,
        "/3303/0/5701": "Cel",
    }


def test_senml_send_names_are_absolute() -> None:
    payload = b'[{"bn":"/","n":"3/0/9","v":13},{"n":"31024/10/1","v":77}]'
    assert decode_values(SENML_JSON, payload, "/") == {"/3/0/9": 13, "/31024/10/1": 77}


def test_senml_json_other_value_kinds_and_base_value() -> None:
    payload = (
        b'[{"bn":"/3/0/","n":"21","vb":false},{"n":"22","vlo":"3:0"},{"n":"23","vd":"AQL_"},'
        b'{"bv":100,"n":"9","v":-1},{"n":"24","s":5}]'
    )
    assert decode_values(SENML_JSON, payload, "/3/0") == {
        "/3/0/21": False,
        "/3/0/22": "3:0",
        "/3/0/23": b"\x01\x02\xff",
        "/3/0/9": 99,
    }


def test_anjay_senml_cbor() -> None:
    payload = bytes.fromhex("81 a2 21 6c2f333330332f302f35373030 02 fa41500000")
    assert decode_values(SENML_CBOR, payload, "/3303/0/5700") == {"/3303/0/5700": 13.0}


def test_senml_cbor_labels_and_bytes() -> None:
    records = [{-2: "/3/0/", 0: "0", 3: "Open Mobile Alliance"}, {0: "21", 4: True}, {0: "23", 8: b"\x00\x01"}]
    assert decode_values(SENML_CBOR, cbor2.dumps(records), "/3/0") == {
        "/3/0/0": "Open Mobile Alliance",
        "/3/0/21": True,
        "/3/0/23": b"\x00\x01",
    }


def test_anjay_cbor_single_value() -> None:
    assert decode_values(CBOR, bytes.fromhex("fa41500000"), "/3303/0/5700") == {"/3303/0/5700": 13.0}
    assert decode_values(CBOR, cbor2.dumps("Cel"), "/3303/0/5701") == {"/3303/0/5701": "Cel"}
    assert decode_values(CBOR, cbor2.dumps(True), "/3/0/21") == {"/3/0/21": True}


def test_cbor_tagged_time_becomes_unix_seconds() -> None:
    assert decode_values(CBOR, bytes.fromhex("c11a6b036a58"), "/3/0/13") == {"/3/0/13": 0x6B036A58}


def test_text_and_opaque_report_under_the_read_path() -> None:
    assert decode_values(TEXT, b"Open Mobile Alliance", "/3/0/0") == {"/3/0/0": "Open Mobile Alliance"}
    assert decode_values(None, b"42", "/31024/10/1") == {"/31024/10/1": "42"}
    assert decode_values(OCTET_STREAM, b"\x00\xff", "/5/0/0") == {"/5/0/0": b"\x00\xff"}


# ---- TLV (§6) --------------------------------------------------------------------------------


def test_tlv_object_read_gives_instance_paths() -> None:
    payload = bytes.fromhex("080a0b c10114 c403c1f00000 c005")
    assert decode_values(TLV, payload, "/31024") == {
        "/31024/10/1": b"\x14",
        "/31024/10/3": bytes.fromhex("c1f00000"),
        "/31024/10/5": b"",
    }


@pytest.mark.parametrize(
    "payload",
    [bytes.fromhex("08 00 0b c1012b 86 06 41 00 01 41 01 05"), bytes.fromhex("c1012b 86 06 41 00 01 41 01 05")],
    ids=["wrapped-in-instance", "bare-resources"],
)
def test_tlv_instance_read_gives_the_same_paths_either_way(payload: bytes) -> None:
    assert decode_values(TLV, payload, "/3/0") == {"/3/0/1": b"+", "/3/0/6/0": b"\x01", "/3/0/6/1": b"\x05"}


@pytest.mark.parametrize("cf", [TLV, 99, 1542])
def test_tlv_multiple_resource_read_and_legacy_numbers(cf: int) -> None:
    assert decode_values(cf, bytes.fromhex("86 06 41 00 01 41 01 05"), "/3/0/6") == {
        "/3/0/6/0": b"\x01",
        "/3/0/6/1": b"\x05",
    }
    assert decode_values(cf, bytes.fromhex("41 00 01 41 01 05"), "/3/0/6") == {"/3/0/6/0": b"\x01", "/3/0/6/1": b"\x05"}


def test_tlv_anjay_temperature_instance() -> None:
    payload = bytes.fromhex("e4164441500000 e3164543656c")
    assert decode_values(TLV, payload, "/3303/0") == {"/3303/0/5700": bytes.fromhex("41500000"), "/3303/0/5701": b"Cel"}


def test_tlv_resource_needs_an_instance_in_the_read_path() -> None:
    with pytest.raises(ContentError):
        decode_values(TLV, bytes.fromhex("c1012b"), "/3")


# ---- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cf", "payload", "base"),
    [
        (TEXT, b"\xff", "/3/0/0"),
        (TEXT, b"x", "/"),
        (TEXT, b"x", "/3/a"),
        (TEXT, b"x", "/1/2/3/4/5"),
        (TEXT, b"x", "/70000"),
        (LINK_FORMAT, b"</3/0>", "/3"),
        (JSON, b"{}", "/3"),
        (12345, b"", "/3"),
        (TLV, b"\xc8", "/3/0"),
        (LWM2M_JSON, b"{", "/3/0"),
        (LWM2M_JSON, b'{"e":[{"n":"1"}]}', "/3/0"),
        (LWM2M_JSON, b'{"bn":"/x/","e":[{"n":"1","v":1}]}', "/3/0"),
        (SENML_JSON, b'{"bn":"/3/0"}', "/3/0"),
        (SENML_JSON, b'[{"n":"1","v":true}]', "/3/0"),
        (SENML_JSON, b'[{"n":"1","vd":"*"}]', "/3/0"),
        (SENML_JSON, b'[{"n":"1/2/3/4","v":1}]', "/3/0"),
        (SENML_CBOR, b"\x81", "/3/0"),
        (SENML_CBOR, cbor2.dumps({"n": "1"}), "/3/0"),
        (SENML_CBOR, cbor2.dumps([{0: 1, 2: 1}]), "/3/0"),
        (CBOR, b"\xfa\x41\x50\x00\x00\x00", "/3/0/1"),
        (CBOR, cbor2.dumps([1]), "/3/0/1"),
        (CBOR, b"\xf6", "/3/0/1"),
        (CBOR, b"", "/3/0/1"),
    ],
)
def test_malformed_or_unsupported_payloads_raise_content_error(cf: int, payload: bytes, base: str) -> None:
    with pytest.raises(ContentError):
        decode_values(cf, payload, base)


def test_content_error_is_a_value_error() -> None:
    assert issubclass(ContentError, ValueError)


@pytest.mark.parametrize("cf", ALL_CFS)
@given(payload=st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_content_error(cf: int | None, payload: bytes) -> None:
    try:
        values = decode_values(cf, payload, "/3/0")
    except ContentError:
        return
    assert all(isinstance(path, str) and path.startswith("/") for path in values)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["bn", "n", "v", "e", "vs"]), inner),
    max_leaves=12,
)


@pytest.mark.parametrize("cf", [SENML_JSON, LWM2M_JSON])
@given(document=json_values)
def test_arbitrary_json_decodes_or_raises_content_error(cf: int, document: object) -> None:
    try:
        decode_values(cf, json.dumps(document).encode(), "/3/0")
    except ContentError:
        pass


cbor_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.integers(-6, 8) | st.text(max_size=3), inner),
    max_leaves=12,
)


@pytest.mark.parametrize("cf", [SENML_CBOR, CBOR])
@given(item=cbor_values)
def test_arbitrary_cbor_decodes_or_raises_content_error(cf: int, item: object) -> None:
    try:
        decode_values(cf, cbor2.dumps(item), "/3/0/1")
    except ContentError:
        pass


# ---- text encoding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, b"1"), (False, b"0"), (42, b"42"), (-30.0, b"-30.0"), ("Cel", b"Cel"), (b"\x00\xff", b"AP8=")],
)
def test_encode_text_value(value: object, text: bytes) -> None:
    assert encode_text_value(value) == text  # type: ignore[arg-type]


def test_encode_text_value_refuses_non_finite_floats() -> None:
    with pytest.raises(ContentError):
        encode_text_value(math.inf)
