"""The CoAP binding in devicehub._core: CoapMessage, coap_decode/coap_encode and coap_encode_uint.

Byte strings are the real-client traces of lwm2m-device-side.md §1/§4; the codec itself is
tested in rust/codec/src/coap/tests.rs, these tests check the conversions and errors the binding adds.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devicehub._core import CoapError, CoapMessage, CoreError, coap_decode, coap_encode, coap_encode_uint

LINKS = b'</>;rt="oma.lwm2m";ct=110,</1>;ver=1.1,</1/0>,</3/0>,</31024/10>'
# spec §1: Wakaama's first datagram, CON POST /rd?lwm2m=1.1&ep=X&b=U&lt=60, Content-Format 40.
WAKAAMA_REGISTER = (
    bytes.fromhex("44 02 6d9a 9a6d2c69 b2 7264 11 28 39 6c776d326d3d312e31 04 65703d58 03 623d55 05 6c743d3630 ff")
    + LINKS
)
# spec §4: NON 2.05 notification, Observe 7, Content-Format 11542 (TLV).
WAKAAMA_NOTIFICATION = bytes.fromhex("54 45 1234 9a6d2c69 61 07 62 2d16 ff 080a0b c10114 c403c1f00000 c005")

URI_PATH, CONTENT_FORMAT, URI_QUERY, OBSERVE, ACCEPT, BLOCK2, BLOCK1, LOCATION_PATH = 11, 12, 15, 6, 17, 23, 27, 8


def test_decode_wakaama_register() -> None:
    message = coap_decode(WAKAAMA_REGISTER)
    assert isinstance(message, CoapMessage)
    assert (message.mtype, message.code, message.mid, message.token) == (0, 0x02, 0x6D9A, bytes.fromhex("9a6d2c69"))
    assert message.uri_path == "/rd"
    assert message.uri_query == ["lwm2m=1.1", "ep=X", "b=U", "lt=60"]
    assert message.content_format == 40
    assert message.options[:2] == [(URI_PATH, b"rd"), (CONTENT_FORMAT, b"\x28")]
    assert message.payload == LINKS
    assert (message.observe, message.accept, message.block1, message.block2) == (None, None, None, None)
    assert message.location_path == []


def test_has_option_agrees_with_the_option_list() -> None:
    message = coap_decode(WAKAAMA_REGISTER)
    numbers = {number for number, _ in message.options}
    assert all(message.has_option(n) == (n in numbers) for n in range(0, 65))
    assert message.has_option(URI_QUERY) and not message.has_option(35)  # Proxy-Uri


def test_decode_notification_pre_parses_observe_and_content_format() -> None:
    message = coap_decode(WAKAAMA_NOTIFICATION)
    assert (message.mtype, message.code, message.observe, message.content_format) == (1, 0x45, 7, 11542)
    assert message.uri_path == "/"
    assert message.payload == bytes.fromhex("080a0b c10114 c403c1f00000 c005")


def test_encode_rebuilds_the_register_trace_from_unsorted_options() -> None:
    options = [
        (URI_QUERY, b"lwm2m=1.1"),
        (URI_PATH, b"rd"),
        (URI_QUERY, b"ep=X"),
        (CONTENT_FORMAT, coap_encode_uint(40)),
        (URI_QUERY, b"b=U"),
        (URI_QUERY, b"lt=60"),
    ]
    assert coap_encode(0, 0x02, 0x6D9A, bytes.fromhex("9a6d2c69"), options, LINKS) == WAKAAMA_REGISTER


def test_register_response_location_path_and_blocks() -> None:
    data = coap_encode(
        2,
        0x41,
        7,
        b"t",
        [(LOCATION_PATH, b"rd"), (LOCATION_PATH, b"acc"), (LOCATION_PATH, b"dev1"), (BLOCK2, b"\x2e"), (BLOCK1, b"")],
    )
    message = coap_decode(data)
    assert message.location_path == ["rd", "acc", "dev1"]
    assert message.block2 == (2, True, 6)
    assert message.block1 == (0, False, 0)


def test_empty_ack_and_default_payload() -> None:
    assert coap_encode(2, 0, 0xBEEF, b"", []) == bytes.fromhex("60 00 beef")
    ack = coap_decode(bytes.fromhex("60 00 beef"))
    assert (ack.mtype, ack.code, ack.mid, ack.token, ack.options, ack.payload) == (2, 0, 0xBEEF, b"", [], b"")


@pytest.mark.parametrize(
    ("value", "encoded"), [(0, b""), (1, b"\x01"), (255, b"\xff"), (256, b"\x01\x00"), (11542, b"\x2d\x16")]
)
def test_encode_uint_is_minimal_big_endian(value: int, encoded: bytes) -> None:
    assert coap_encode_uint(value) == encoded


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(bytes.fromhex("40 01 00"), id="short-header"),
        pytest.param(bytes.fromhex("80 01 0000"), id="version-2"),
        pytest.param(bytes.fromhex("49 01 0000 000000000000000000"), id="token-length-9"),
        pytest.param(bytes.fromhex("48 01 0000 0102"), id="truncated-token"),
        pytest.param(bytes.fromhex("40 01 0000 f0"), id="delta-15"),
        pytest.param(bytes.fromhex("40 01 0000 0f"), id="length-15"),
        pytest.param(bytes.fromhex("40 01 0000 ff"), id="marker-no-payload"),
        pytest.param(bytes.fromhex("40 01 0000 d0"), id="truncated-extended-delta"),
        pytest.param(bytes.fromhex("40 01 0000 03 6162"), id="truncated-value"),
        pytest.param(bytes.fromhex("40 01 0000 b2 fffe"), id="uri-path-not-utf8"),
        pytest.param(bytes.fromhex("40 01 0000 64 00000001"), id="observe-4-bytes"),
        pytest.param(bytes.fromhex("40 01 0000 c3 000028"), id="content-format-3-bytes"),
        pytest.param(bytes.fromhex("40 01 0000 d1 0a 07"), id="block2-szx-7"),
        pytest.param(bytes.fromhex("60 00 0000 aa"), id="empty-message-with-bytes"),
    ],
)
def test_malformed_input_raises_coap_error(data: bytes) -> None:
    with pytest.raises(CoapError):
        coap_decode(data)


def test_coap_error_is_a_core_error_and_value_error() -> None:
    assert issubclass(CoapError, CoreError)
    assert issubclass(CoapError, ValueError)


@pytest.mark.parametrize(
    ("mtype", "code", "mid", "token", "options"),
    [
        pytest.param(4, 1, 0, b"", [], id="mtype-4"),
        pytest.param(-1, 1, 0, b"", [], id="mtype-negative"),
        pytest.param(0, 256, 0, b"", [], id="code-256"),
        pytest.param(0, 1, 0x10000, b"", [], id="mid-65536"),
        pytest.param(0, 1, -1, b"", [], id="mid-negative"),
        pytest.param(0, 1, 0, b"123456789", [], id="token-9"),
        pytest.param(0, 1, 0, b"", [(65536, b"")], id="option-number-65536"),
        pytest.param(0, 0, 0, b"t", [], id="empty-message-with-token"),
    ],
)
def test_unencodable_arguments_raise_coap_error(
    mtype: int, code: int, mid: int, token: bytes, options: list[tuple[int, bytes]]
) -> None:
    with pytest.raises(CoapError):
        coap_encode(mtype, code, mid, token, options)


def test_encode_uint_rejects_negative() -> None:
    with pytest.raises(CoapError):
        coap_encode_uint(-1)


# Options with arbitrary raw values; the pre-parsed numbers get values of their own format.
CHECKED = {URI_PATH, URI_QUERY, LOCATION_PATH, OBSERVE, CONTENT_FORMAT, ACCEPT, BLOCK1, BLOCK2}
raw_options = st.tuples(st.integers(0, 0xFFFF).filter(lambda n: n not in CHECKED), st.binary(max_size=300))
text_options = st.tuples(st.sampled_from([URI_PATH, URI_QUERY, LOCATION_PATH]), st.text(max_size=20).map(str.encode))
uint_options = st.one_of(
    st.tuples(st.just(OBSERVE), st.integers(0, 0xFFFFFF).map(coap_encode_uint)),
    st.tuples(st.sampled_from([CONTENT_FORMAT, ACCEPT]), st.integers(0, 0xFFFF).map(coap_encode_uint)),
    st.tuples(
        st.sampled_from([BLOCK1, BLOCK2]),
        st.builds(
            lambda num, m, szx: coap_encode_uint(num << 4 | m << 3 | szx),
            st.integers(0, 2**20 - 1),
            st.integers(0, 1),
            st.integers(0, 6),
        ),
    ),
)


@given(
    mtype=st.integers(0, 3),
    code=st.integers(1, 255),
    mid=st.integers(0, 0xFFFF),
    token=st.binary(max_size=8),
    options=st.lists(st.one_of(raw_options, text_options, uint_options), max_size=8),
    payload=st.binary(max_size=64),
)
def test_encode_decode_round_trip(
    mtype: int, code: int, mid: int, token: bytes, options: list[tuple[int, bytes]], payload: bytes
) -> None:
    data = coap_encode(mtype, code, mid, token, options, payload)
    message = coap_decode(data)
    assert (message.mtype, message.code, message.mid, message.token, message.payload) == (
        mtype,
        code,
        mid,
        token,
        payload,
    )
    assert message.options == sorted(options, key=lambda option: option[0])
    segments = [value.decode() for number, value in options if number == URI_PATH]
    assert message.uri_path == "/" + "/".join(segments)
    assert coap_encode(mtype, code, mid, token, message.options, payload) == data


@given(st.binary(max_size=128))
def test_arbitrary_bytes_decode_or_raise_coap_error(data: bytes) -> None:
    try:
        message = coap_decode(data)
    except CoapError:
        return
    assert (
        coap_encode(message.mtype, message.code, message.mid, message.token, message.options, message.payload) == data
    )


@pytest.mark.parametrize(
    ("number", "bad"),
    [
        (OBSERVE, b"\0\0\0\1"),
        (CONTENT_FORMAT, b"\0\0\x28"),
        (ACCEPT, b"\0\0\x28"),
        (BLOCK2, b"\x07"),
        (BLOCK1, b"\x0f"),
    ],
)
def test_a_bad_pre_parsed_option_is_refused_by_decode_even_as_a_repeat(number: int, bad: bytes) -> None:
    """The transport's option check relies on this: no accessor of a decoded message can raise."""
    good = {OBSERVE: b"\x07", CONTENT_FORMAT: b"\x28", ACCEPT: b"\x28", BLOCK2: b"\x06", BLOCK1: b"\x06"}[number]
    assert coap_decode(coap_encode(0, 1, 1, b"t", [(number, good)])) is not None
    for options in ([(number, bad)], [(number, good), (number, bad)]):
        with pytest.raises(CoapError):
            coap_decode(coap_encode(0, 1, 1, b"t", options))


def test_the_first_unrecognised_critical_option_is_named_by_the_codec() -> None:
    assert coap_decode(WAKAAMA_REGISTER).unrecognised_critical is None
    assert coap_decode(WAKAAMA_NOTIFICATION).unrecognised_critical is None
    # If-Match (1) is critical and not implemented; Size1 (60) is elective; 65 is an unknown critical option
    assert coap_decode(coap_encode(0, 1, 1, b"", [(URI_PATH, b"rd"), (1, b"")])).unrecognised_critical == 1
    assert coap_decode(coap_encode(0, 1, 1, b"", [(60, b"\1"), (65, b""), (67, b"")])).unrecognised_critical == 65
