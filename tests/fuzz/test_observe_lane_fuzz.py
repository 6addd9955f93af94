"""The notification lane takes datagrams from devices before any Python sees them (issue 15 #2): whatever bytes an
armed device sends — real notifications mutated, cut, or sent again — `ObserveLane.sift` never raises, hands over
only the armed observation's values with numbers that move forward (RFC 7641 §3.4), leaves every other datagram
as it was, and answers only CON datagrams with their own message ID."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conftest import FUZZ
from devicehub._core import ObserveLane, ObserveOrder, coap_decode, coap_encode, coap_encode_uint
from devicehub.lwm2m import codes

DEVICE, PATH, TOKEN = "d" * 32, "/3303/0/5700", b"\x9a\x6d\x2c\x69"
ADDRESS = ("127.0.0.1", 56830)


def _notification(mtype: int, mid: int, seq: int, payload: bytes) -> bytes:
    options = [(codes.OBSERVE, coap_encode_uint(seq)), (codes.CONTENT_FORMAT, b"")]
    return coap_encode(mtype, codes.CONTENT, mid, TOKEN, options, payload)


def _mutated(data: bytes, flips: list[tuple[int, int]], cut: int | None) -> bytes:
    out = bytearray(data)
    for position, value in flips:
        out[position % len(out)] = value
    return bytes(out[:cut] if cut is not None else out)


DATAGRAM = st.builds(
    _mutated,
    st.builds(
        _notification,
        st.sampled_from([codes.CON, codes.NON]),
        st.integers(0, 0xFFFF),
        st.integers(0, (1 << 24) - 1),
        st.binary(max_size=24),
    ),
    st.lists(st.tuples(st.integers(0, 63), st.integers(0, 255)), max_size=4),
    st.none() | st.integers(0, 48),
)


@FUZZ
@given(st.lists(DATAGRAM | st.binary(max_size=64), min_size=1, max_size=16), st.booleans())
def test_any_datagrams_of_an_armed_device_are_sifted_without_error(datagrams: list[bytes], again: bool) -> None:
    lane = ObserveLane(64, 247.0, 1500)
    order = ObserveOrder()  # what the server's observation gives the lane: its order, moved on by each value
    assert lane.arm(DEVICE, ADDRESS, TOKEN, PATH, order)
    sent = datagrams + datagrams if again else datagrams  # a second pass: retransmissions of every CON one
    others, values, acks, (taken, duplicates, stale) = lane.sift(sent, ADDRESS, 1.0)
    assert taken == len(sent) - len(others) and duplicates + stale <= taken
    assert all(datagram in sent for datagram in others)
    last = None
    for device_id, path, _content_format, _payload, seq in values:
        assert (device_id, path) == (DEVICE, PATH)
        assert last is None or 0 < (seq - last) % (1 << 24) < 1 << 23, "numbers only move forward"
        last = seq
    assert order.last_seq == last if values else True
    taken_mids = {int.from_bytes(d[2:4], "big") for d in sent if d not in others and d[0] >> 4 & 3 == codes.CON}
    for ack, address in acks:
        assert address == ADDRESS
        reply = coap_decode(ack)
        assert (reply.mtype, reply.code, reply.token) == (codes.ACK, codes.EMPTY, b"")
        assert reply.mid in taken_mids
