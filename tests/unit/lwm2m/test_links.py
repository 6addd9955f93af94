"""CoRE link format as real clients send it (lwm2m-device-side.md §2, §8); every test runs against the Rust parser
and its pure-Python twin."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from devicehub import _core
from devicehub.domain.model import ResourceLink
from devicehub.lwm2m.links import (
    LinkFormatError,
    format_links,
    link_attributes,
    parse_links,
    parse_links_py,
    shared_link,
)

Parse = Callable[[bytes], list[ResourceLink]]


@pytest.fixture(params=[parse_links, parse_links_py], ids=["rust", "python"])
def parse(request: pytest.FixtureRequest) -> Parse:
    return cast(Parse, request.param)


def test_wakaama_payload_skips_the_root_link_and_keeps_objects_and_instances(parse: Parse) -> None:
    payload = b'</>;rt="oma.lwm2m";ct=110,</1>;ver=1.1,</1/0>,</3/0>,</31024>;ver=1.0,</31024/10>'
    assert [link.path for link in parse(payload)] == ["/1", "/1/0", "/3/0", "/31024", "/31024/10"]


def test_pelion_per_resource_links_carry_values_tokens_and_attributes(parse: Parse) -> None:
    payload = b'</3/0/0>;rt="Manufacturer";if="a,b";v="ARM";aobs="517",</5/0/1>;ct=42;v="AAE=",</3/0/9>;obs'
    first, opaque, observable = parse(payload)
    assert first == ResourceLink(path="/3/0/0", rt="Manufacturer", iface="a,b", value=b"ARM", aobs=517)
    assert opaque.value == b"\x00\x01" and opaque.ct == 42
    assert observable.obs


def test_deleted_marker_in_an_update(parse: Parse) -> None:
    (link,) = parse(b"</3303/1/5700>;d")
    assert link.deleted


@pytest.mark.parametrize("payload", [b'</3/0>;rt="open', b"3/0", b"</3/0", b"\xff\xfe"])
def test_malformed_link_format_is_a_typed_error(payload: bytes, parse: Parse) -> None:
    with pytest.raises(LinkFormatError):
        parse(payload)


def test_non_lwm2m_paths_are_ignored(parse: Parse) -> None:
    assert parse(b"</rd>,</3/a>,</70000/0>,</3/0/0/0/0>") == []


paths = st.lists(st.integers(0, 65535), min_size=1, max_size=3).map(lambda ids: "/" + "/".join(map(str, ids)))
texts = st.text(st.characters(codec="utf-8"), max_size=10)  # `"`, `\`, `,`, `;`, `<`, `>`, controls: anything
links = st.builds(
    ResourceLink,
    path=paths,
    rt=st.none() | texts,
    iface=st.none() | texts,
    obs=st.booleans(),
    aobs=st.none() | st.integers(1, 1023),
    value=st.none() | texts.map(str.encode),
)


@given(st.lists(links, max_size=8))
@example([ResourceLink(path="/3/0/0", rt='x"obs,</3/0/9>;obs;aobs=3"', value=b'\\"\\')])
def test_format_then_parse_is_identity(items: list[ResourceLink]) -> None:
    """The formatter writes only what both parsers read back to the same links: a `"` or `\\` in a value is
    escaped (RFC 6690 §2 quoted-string, RFC 2616 §2.2 quoted-pair); it was written as it is, and the links read
    back were others."""
    assert parse_links(format_links(items)) == items
    assert parse_links_py(format_links(items)) == items


@pytest.mark.parametrize(
    ("payload", "rt"),
    [
        (b'</1/0>;rt="a\\"b"', 'a"b'),  # a quoted-pair `\"` is a `"` in the value, not its end
        (b'</1/0>;rt="a\\\\"', "a\\"),  # `\\` is one backslash, and the quote after it ends the value
        (b'</1/0>;rt="\\x,</2/0>;y"', "x,</2/0>;y"),  # any character may be quoted; separators inside stay
        (b"</1/0>;rt=a\\b", "a\\b"),  # outside quotes a backslash is itself (tolerated: not a ptoken character)
    ],
)
def test_quoted_pairs_are_read_as_the_character_they_quote(payload: bytes, rt: str, parse: Parse) -> None:
    (link,) = parse(payload)
    assert link.rt == rt


def test_an_escaped_closing_quote_leaves_the_value_unterminated(parse: Parse) -> None:
    with pytest.raises(LinkFormatError, match="unterminated"):
        parse(b'</1/0>;rt="a\\"')


def test_bootstrap_discover_attributes_read_quoted_pairs_too() -> None:
    assert link_attributes(b'</0/1>;ssid=1;uri="coap://h:5683/\\"q\\""') == [
        ("/0/1", {"ssid": "1", "uri": 'coap://h:5683/"q"'})
    ]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xff", "link format is not UTF-8"),
        (b'</3/0>;rt="open', "unterminated quote or bracket"),
        (b"</3/0", "unterminated quote or bracket"),
        ("</3/0>, 3/0\u00e9'x".encode(), 'link target must be <…>: "3/0\u00e9\'x"'),
        (b"</1/0>," + b"a" * 60, "link target must be <…>: '" + "a" * 40 + "'"),
        (b"</1/0>," * 20_001, "more than 20000 links"),
    ],
)
def test_both_parsers_refuse_malformed_payloads_with_the_same_message(payload: bytes, message: str) -> None:
    for parser in (parse_links, parse_links_py):
        with pytest.raises(LinkFormatError) as refused:
            parser(payload)
        assert str(refused.value) == message


def test_non_ascii_digits_are_not_lwm2m_paths_or_numbers(parse: Parse) -> None:
    """Issue 14 #2: `</²/0>` raised ValueError (a 5.00), `</١/0>` became a path no request can address."""
    links = parse("</\u00b2/0>,</\u0661/0>,</3/\u0661>,</3/0>;ct=\u00b2;aobs=\u0661\u0662".encode())
    assert [(link.path, link.ct, link.aobs) for link in links] == [("/3/0", None, None)]


def test_equal_links_of_different_payloads_are_one_shared_object() -> None:
    """Issue 16: a fleet registers the same links; the Rust table hands out one object per distinct link, the one
    a stored registration's links (`shared_link`) get too."""
    first = parse_links(b'</3/0/0>;obs,</3/0/2>;v="SN-1",</3303/0/5700>;obs;aobs=7')
    second = parse_links(b'</3/0/0>;obs,</3/0/2>;v="SN-2",</3303/0/5700>;obs;aobs=8')
    assert second[0] is first[0]
    assert second[1] is not first[1] and second[1].value == b"SN-2"
    assert second[2] == ResourceLink(path="/3303/0/5700", obs=True, aobs=8) and second[2] is not first[2]
    assert shared_link("/3/0/0", None, None, True, None, None) is first[0]
    assert shared_link("/3303/0/5700", None, None, True, None, 7) is first[2]


def test_a_full_link_table_starts_afresh_and_never_holds_more_than_its_capacity() -> None:
    made: list[str] = []

    def make(*fields: object) -> ResourceLink:
        made.append(str(fields[0]))
        return ResourceLink(*fields)  # type: ignore[arg-type]

    table = _core.LinkTable(make, 2)
    kept = table.parse(b"</1/0/1>,</1/0/2>")
    assert len(table) == 2 and made == ["/1/0/1", "/1/0/2"]
    assert table.parse(b"</1/0/2>")[0] is kept[1]  # known: no new object
    table.parse(b"</1/0/3>")  # a third link: a new table
    assert len(table) == 1
    again = table.parse(b"</1/0/1>")[0]  # known before the restart: an equal object, built again
    assert again == kept[0] and again is not kept[0]
    for n in range(200):
        table.parse(f"</1/0/{n}>".encode())
        assert len(table) <= 2


def test_an_error_in_make_reaches_the_caller_and_leaves_the_table_usable() -> None:
    def refuse(*fields: object) -> ResourceLink:
        raise ValueError("no")

    table = _core.LinkTable(refuse)
    with pytest.raises(ValueError, match="no"):
        table.parse(b"</3/0>")
    assert len(table) == 0
    with pytest.raises(LinkFormatError, match="link target"):
        table.parse(b"3/0")
