"""CoAP option handling in the server (issue 14 #12): requests with generated options (known and unknown numbers,
critical or not, odd lengths, repeated, Block1/Observe values out of range) at a live node over real UDP. Every
confirmable one is answered, never with 5.00, and the node logs no error."""

from __future__ import annotations

import socket

from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import FUZZ
from devicehub._core import CoapError, coap_decode, coap_encode
from devicehub.lwm2m import codes
from support.live_node import LiveNode

NUMBERS = [1, 3, 4, 5, 6, 7, 8, 11, 12, 14, 15, 17, 20, 23, 27, 28, 35, 39, 60, 258, 2049, 65000]
PATHS = [b"rd", b"dp", b"bs", b"3", b"0", b"", b"rd/x", b"\xff"]
QUERIES = [
    b"ep=fuzz",
    b"lt=60",
    b"lt=-1",
    b"lt=\xc2\xb2",
    b"lwm2m=1.1",
    b"lwm2m=9",
    b"b=UQ",
    b"Q",
    b"et=x",
    b"d=y",
    b"=",
]
LINKS = [b"", b"</3/0>", b"</3/0>,</3303/0>;aobs=3", b"<", b"\xff\xfe", b"</\xc2\xb2/0>"]


@st.composite
def options(draw: st.DrawFn) -> list[tuple[int, bytes]]:
    chosen: list[tuple[int, bytes]] = []
    for _ in range(draw(st.integers(0, 8))):
        number = draw(st.sampled_from([*NUMBERS, draw(st.integers(0, 65535))]))
        if number == codes.URI_PATH:
            value = draw(st.sampled_from(PATHS))
        elif number == codes.URI_QUERY:
            value = draw(st.sampled_from(QUERIES))
        else:
            value = draw(st.binary(max_size=draw(st.sampled_from([0, 1, 2, 3, 4, 9, 300]))))
        chosen.append((number, value))
    if draw(st.booleans()):  # most interesting requests go to the registration interface
        chosen = [
            (codes.URI_PATH, b"rd"),
            (codes.URI_QUERY, b"ep=fuzz-" + draw(st.binary(max_size=4)).hex().encode()),
            *chosen,
        ]
    return sorted(chosen, key=lambda option: option[0])


@FUZZ
@given(
    code=st.sampled_from([codes.GET, codes.POST, codes.PUT, codes.DELETE, codes.FETCH, codes.IPATCH, 0x1F]),
    token=st.binary(max_size=8),
    opts=options(),
    payload=st.sampled_from(LINKS) | st.binary(max_size=64),
    mid=st.integers(0, 0xFFFF),
)
def test_generated_options_are_answered_without_server_errors(
    live_node: LiveNode, code: int, token: bytes, opts: list[tuple[int, bytes]], payload: bytes, mid: int
) -> None:
    try:
        datagram = coap_encode(codes.CON, code, mid, token, opts, payload)
    except (CoapError, ValueError, OverflowError):
        assume(False)
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(10)
    try:
        sock.sendto(datagram, ("127.0.0.1", live_node.node.coap_port))
        reply = coap_decode(sock.recv(65535))
    finally:
        sock.close()
    assert reply.mid == mid
    assert reply.code != codes.INTERNAL_ERROR, reply.payload
    assert live_node.error_messages() == []
