"""RFC 8323 §3.2 framing: every length class round-trips, split input waits, and no byte string crashes the decoder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devicehub.lwm2m.tcp import FrameError, decode_frame, encode_frame


@given(st.integers(0, 255), st.binary(max_size=8), st.binary(max_size=70_000))
def test_a_frame_round_trips_and_a_prefix_of_it_is_incomplete(code: int, token: bytes, body: bytes) -> None:
    data = encode_frame(code, token, body)
    decoded = decode_frame(data + b"\x00rest", limit=1 << 20)
    assert decoded is not None
    frame, used = decoded
    assert (frame.code, frame.token, frame.body, used) == (code, token, body, len(data))
    assert decode_frame(data[:-1], limit=1 << 20) is None


@pytest.mark.parametrize(
    ("size", "head"), [(12, b"\xc0"), (13, b"\xd0\x00"), (268, b"\xd0\xff"), (269, b"\xe0\x00\x00")]
)
def test_the_length_nibble_and_extended_length_follow_rfc_8323(size: int, head: bytes) -> None:
    assert encode_frame(0x02, b"", bytes(size)).startswith(head + b"\x02")


@given(st.binary(max_size=64))
def test_any_bytes_decode_to_a_frame_none_or_frame_error(data: bytes) -> None:
    try:
        decode_frame(data, limit=32)
    except FrameError:
        pass


def test_a_declared_length_above_the_limit_is_refused_before_the_body_arrives() -> None:
    with pytest.raises(FrameError):
        decode_frame(b"\xf0\x00\x00\x00\x00", limit=65_535)
