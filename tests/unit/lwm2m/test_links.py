"""CoRE link format as real clients send it (lwm2m-device-side.md §2, §8)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devicehub.lwm2m.links import LinkFormatError, format_links, parse_links
from devicehub.lwm2m.ports import ResourceLink


def test_wakaama_payload_skips_the_root_link_and_keeps_objects_and_instances() -> None:
    payload = b'</>;rt="oma.lwm2m";ct=110,</1>;ver=1.1,</1/0>,</3/0>,</31024>;ver=1.0,</31024/10>'
    assert [link.path for link in parse_links(payload)] == ["/1", "/1/0", "/3/0", "/31024", "/31024/10"]


def test_pelion_per_resource_links_carry_values_tokens_and_attributes() -> None:
    payload = b'</3/0/0>;rt="Manufacturer";if="a,b";v="ARM";aobs="517",</5/0/1>;ct=42;v="AAE=",</3/0/9>;obs'
    first, opaque, observable = parse_links(payload)
    assert first == ResourceLink(path="/3/0/0", rt="Manufacturer", iface="a,b", value=b"ARM", aobs=517)
    assert opaque.value == b"\x00\x01" and opaque.ct == 42
    assert observable.obs


def test_deleted_marker_in_an_update() -> None:
    (link,) = parse_links(b"</3303/1/5700>;d")
    assert link.deleted


@pytest.mark.parametrize("payload", [b'</3/0>;rt="open', b"3/0", b"</3/0", b"\xff\xfe"])
def test_malformed_link_format_is_a_typed_error(payload: bytes) -> None:
    with pytest.raises(LinkFormatError):
        parse_links(payload)


def test_non_lwm2m_paths_are_ignored() -> None:
    assert parse_links(b"</rd>,</3/a>,</70000/0>,</3/0/0/0/0>") == []


paths = st.lists(st.integers(0, 65535), min_size=1, max_size=3).map(lambda ids: "/" + "/".join(map(str, ids)))
links = st.builds(
    ResourceLink,
    path=paths,
    rt=st.none() | st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"'), max_size=10),
    obs=st.booleans(),
    aobs=st.none() | st.integers(1, 1023),
    value=st.none()
    | st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"'), max_size=10).map(str.encode),
)


@given(st.lists(links, max_size=8))
def test_format_then_parse_is_identity(items: list[ResourceLink]) -> None:
    assert parse_links(format_links(items)) == items


def test_non_ascii_digits_are_not_lwm2m_paths_or_numbers() -> None:
    """Issue 14 #2: `</²/0>` raised ValueError (a 5.00), `</١/0>` became a path no request can address."""
    links = parse_links("</\u00b2/0>,</\u0661/0>,</3/\u0661>,</3/0>;ct=\u00b2;aobs=\u0661\u0662".encode())
    assert [(link.path, link.ct, link.aobs) for link in links] == [("/3/0", None, None)]
