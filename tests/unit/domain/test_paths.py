"""Resource path validation and wildcard matching (wire-format.md "Common", spec §2.1–2.2)."""

import pytest

from devicehub.domain.paths import matches, name_matches, normalise, observe_targets
from devicehub.errors import ValidationFailed


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("3303/0/5700", "/3303/0/5700"),
        ("/3303/0/5700", "/3303/0/5700"),
        ("3/0", "/3/0"),
        ("3303/0/5700/", "/3303/0/5700"),
    ],
)
def test_normalise_accepts_sdk_and_slash_forms(raw: str, expected: str) -> None:
    assert normalise(raw, wildcard=False) == expected


@pytest.mark.parametrize("raw", ["", "/", "abc", "3303/x", "1/2/3/4/5", "3303/*", "70000/0", "3//0"])
def test_normalise_rejects_bad_paths_without_wildcards(raw: str) -> None:
    with pytest.raises(ValidationFailed):
        normalise(raw, wildcard=False)


def test_a_remembered_normal_form_answers_only_for_the_same_path_and_wildcard_rule() -> None:
    """The valid paths already normalised are remembered; a wildcard path accepted where wildcards are allowed is
    still refused where they are not, naming the field, however often either is asked."""
    for _ in range(2):
        assert normalise("3303/0/5700/", wildcard=False) == "/3303/0/5700"
        assert normalise("3303/*", wildcard=True) == "/3303/*"
        with pytest.raises(ValidationFailed) as refused:
            normalise("3303/*", wildcard=False, field="uri")
        assert [f.name for f in refused.value.fields] == ["uri"]


def test_wildcard_only_allowed_last() -> None:
    assert normalise("3303/*", wildcard=True) == "/3303/*"
    assert normalise("33*", wildcard=True) == "/33*"
    with pytest.raises(ValidationFailed):
        normalise("*/0/1", wildcard=True)


def test_object_wildcard_matches_object_and_everything_below() -> None:
    assert matches("/3303/*", "/3303")
    assert matches("/3303/*", "/3303/0/5700")
    assert not matches("/3303/*", "/33030/0")
    assert matches("/33*", "/3303/0/5700")
    assert matches("/3303/0/5700", "/3303/0/5700")
    assert not matches("/3303/0/5700", "/3303/0/5701")


def test_observe_target_of_object_wildcard_is_the_object() -> None:
    assert observe_targets("/3303/*", []) == ["/3303"]
    assert observe_targets("/33*", ["/3303/0/5700", "/3/0/0"]) == ["/3303/0/5700"]
    assert observe_targets("/3/0/0", []) == ["/3/0/0"]


def test_presubscription_names_match_exactly_or_by_prefix() -> None:
    assert name_matches(None, "anything")
    assert name_matches("node-*", "node-7")
    assert not name_matches("node-*", "gw-1")
    assert name_matches("sensor", "sensor")
    assert not name_matches("sensor", "sensor2")


@pytest.mark.parametrize("raw", ["/\u00b2/0", "/\u0661/0", "/3303/\uff10", "3303\n", "/3/0/0\n", "/\u0663\u0663*"])
def test_paths_are_ascii_digits_only(raw: str) -> None:
    """Issue 14 #2: `isdigit` and `$` let superscripts, Arabic-Indic digits and a trailing newline through."""
    for wildcard in (False, True):
        with pytest.raises(ValidationFailed):
            normalise(raw, wildcard=wildcard)
