"""devicehub._core CBOR bindings: Anjay's bytes, round trips, Python type mapping and typed errors."""

from __future__ import annotations

import pytest

from devicehub._core import (
    CborError,
    CoreError,
    lwm2m_cbor_decode,
    lwm2m_cbor_encode,
    senml_cbor_decode,
    senml_cbor_encode,
)
from devicehub.domain.content_formats import LWM2M_CBOR, known_cf
from devicehub.lwm2m.content import ContentError, decode_values


def test_anjay_vectors_decode() -> None:
    assert lwm2m_cbor_decode(bytes.fromhex("a1830d181a01182a")) == [((13, 26, 1), 42)]
    assert senml_cbor_decode(bytes.fromhex("81a2216c2f333330332f302f3537303002fa41500000")) == [("/3303/0/5700", 13.0)]


def test_round_trips_keep_python_types() -> None:
    entries: list[tuple[tuple[int, ...], int | float | bool | str | bytes]] = [
        ((3, 0, 0), "devicehub"),
        ((3, 0, 9), 100),
        ((3, 0, 17), b"\x00\x01"),
        ((3303, 0, 5700), 21.5),
        ((3311, 0, 5850), True),
    ]
    assert lwm2m_cbor_decode(lwm2m_cbor_encode(entries)) == entries
    assert senml_cbor_decode(senml_cbor_encode([("0", True), ("9", 2**64 - 1)], "/3/0/")) == [
        ("/3/0/0", True),
        ("/3/0/9", 2**64 - 1),
    ]


def test_errors_are_typed() -> None:
    assert issubclass(CborError, CoreError)
    with pytest.raises(CborError):
        lwm2m_cbor_decode(b"\xa1\x83\x0d")
    with pytest.raises(CborError):
        lwm2m_cbor_encode([((1, 70000), 1)])
    with pytest.raises(CborError):
        senml_cbor_encode([("n", 2**64)])
    with pytest.raises(CborError):
        senml_cbor_encode([("n", None)])  # type: ignore[list-item]


def test_content_layer_checks_lwm2m_cbor_paths_against_the_read() -> None:
    payload = lwm2m_cbor_encode([((3303, 0, 5700), 21.5), ((3303, 0, 5701), "Cel")])
    assert decode_values(LWM2M_CBOR, payload, "/3303/0") == {"/3303/0/5700": 21.5, "/3303/0/5701": "Cel"}
    with pytest.raises(ContentError):
        decode_values(LWM2M_CBOR, payload, "/3/0")
    with pytest.raises(ContentError):
        decode_values(LWM2M_CBOR, b"\xff", "/3/0")


def test_known_content_formats_by_name_or_number() -> None:
    assert known_cf("application/vnd.oma.lwm2m+cbor") == 11544
    assert known_cf("application/senml+cbor; charset=x") == 112
    assert known_cf("11544") == 11544 and known_cf("99") == 11542
    assert known_cf("application/x-nope") is None and known_cf("99999") is None and known_cf("") is None
