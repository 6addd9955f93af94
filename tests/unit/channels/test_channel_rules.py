"""Pure channel rules: the retry table, callback registration bodies, the WebSocket key in the handshake."""

from __future__ import annotations

import pytest

from devicehub.channels.callback import parse_registration, retry_wait
from devicehub.channels.websocket import key_from_protocols
from devicehub.errors import InvalidHeader, ValidationFailed


def test_retry_waits_follow_the_spec_table() -> None:
    # spec §6 rule 7: since previous attempt 1, 2, 4 … 64 s, then 120 s each; since initial failure 1, 3, 7 … 487
    waits = [retry_wait(n) for n in range(1, 13)]
    assert waits == [1, 2, 4, 8, 16, 32, 64, 120, 120, 120, 120, 120]
    since_failure = [sum(waits[:n]) for n in range(1, 11)]
    assert since_failure == [1, 3, 7, 15, 31, 63, 127, 247, 367, 487]
    assert retry_wait(10_000) == 120


def test_registration_body_keeps_url_headers_and_options() -> None:
    target = parse_registration(
        {
            "url": "https://app.example/cb",
            "headers": {"Authorization": "Bearer t"},
            "serialization": {"max_chunk_size": "500"},
        }
    )
    assert target.url == "https://app.example/cb"
    assert target.headers == {"Authorization": "Bearer t"}
    assert target.options.max_chunk_size == 500


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "url"),
        ({"url": 5}, "url"),
        ({"url": "ftp://app.example/cb"}, "url"),
        ({"url": "/relative"}, "url"),
        ({"url": "https://app.example/" + "x" * 380, "headers": {"Authorization": "Bearer " + "t" * 10}}, "url"),
        ({"url": "https://app.example/cb", "headers": {"X": 1}}, "headers"),
        ({"url": "https://app.example/cb", "headers": {"X": "a\r\nInjected: 1"}}, "headers"),
        ({"url": "https://app.example/cb", "serialization": {"type": "v1"}}, "serialization.type"),
        ([], "body"),
    ],
)
def test_bad_registration_bodies_are_400(body: object, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_registration(body)
    assert [f.name for f in caught.value.fields] == [field]


@pytest.mark.parametrize(
    "headers",
    [{"X": "a\r\nInjected: 1"}, {"X": "a\nb"}, {"X": "a\x00"}, {"Bad Name": "v"}, {"X:Y": "v"}, {"X\r\nY": "v"}],
)
def test_a_header_that_would_split_the_request_has_its_own_error(headers: dict[str, str]) -> None:
    """issue 28: CR/LF (header injection) is not malformed JSON: the application is told its header is the problem."""
    with pytest.raises(InvalidHeader) as caught:
        parse_registration({"url": "https://app.example/cb", "headers": headers})
    assert caught.value.token == "MALFORMED_HEADER" and caught.value.status == 400
    assert [f.name for f in caught.value.fields] == ["headers"] and next(iter(headers)) in str(caught.value)


def test_400_characters_of_url_and_headers_are_allowed() -> None:
    url = "http://a.example/" + "x" * (400 - len("http://a.example/") - 2)
    assert parse_registration({"url": url, "headers": {"A": "b"}}).url == url


@pytest.mark.parametrize(
    ("header", "key"),
    [("wss, pelion_ak_123", "ak_123"), ("pelion_ak_123,wss", "ak_123"), ("wss", None), ("", None), ("pelion_", None)],
)
def test_key_comes_from_the_prefixed_subprotocol_in_either_order(header: str, key: str | None) -> None:
    assert key_from_protocols(header) == key
