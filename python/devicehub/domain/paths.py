"""Resource paths: validation, wildcard patterns and the path a wildcard subscription observes."""

from __future__ import annotations

import re

from devicehub.errors import FieldError, InvalidPath

# Issue 14 #2: ASCII digits only (fullmatch: `$` would also accept a trailing newline), as lwm2m/links.py does
_SEGMENT = re.compile(r"[0-9]{1,5}", re.ASCII)
MAX_PATH = 128


def is_segment(text: str) -> bool:
    """One object, instance or resource id: 1-5 ASCII digits, at most 65535."""
    return _SEGMENT.fullmatch(text) is not None and int(text) <= 65535


# (raw, wildcard) → its normal form, for paths already found valid: every device request and subscription normalises
# its path, mostly the same few (1.6 % of the event loop under the device-request bench, issue 15); bounded, so many
# distinct paths only stop being remembered
_NORMALISED: dict[tuple[str, bool], str] = {}
_NORMALISED_MAX = 4096


def normalise(raw: str, *, wildcard: bool, field: str = "path") -> str:
    """'3303/0/5700', '/3303/0/5700' or '%2F'-decoded forms → '/3303/0/5700'; '*' only at the end.

    A bad path is a 400 naming `field` (the URL's `path`, or the body field that held it)."""
    known = _NORMALISED.get((raw, wildcard))
    if known is not None:
        return known
    path = _normalise(raw, wildcard, field)
    if len(_NORMALISED) < _NORMALISED_MAX:
        _NORMALISED[(raw, wildcard)] = path
    return path


def _normalise(raw: str, wildcard: bool, field: str) -> str:
    def bad(message: str) -> InvalidPath:
        return InvalidPath(message, fields=(FieldError(field, message),))

    path = raw if raw.startswith("/") else "/" + raw
    if len(path) > MAX_PATH:
        raise bad(f"resource path longer than {MAX_PATH} characters")
    parts = path[1:].split("/")
    if parts and parts[-1] == "":
        parts = parts[:-1]
    if not parts:
        raise bad("empty resource path")
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if wildcard and last and (part == "*" or (part.endswith("*") and is_segment(part[:-1] or "0"))):
            continue
        if not is_segment(part):
            raise bad(f"bad resource path {raw!r}")
    if len(parts) > 4:
        raise bad(f"resource path {raw!r} is deeper than object/instance/resource/instance")
    return "/" + "/".join(parts)


def matches(pattern: str, path: str) -> bool:
    """Pattern '/3303/*' matches '/3303', '/3303/0' and everything below; other patterns match exactly
    or as a prefix ending in '*' ('/33*' matches '/3303/0/5700')."""
    if pattern.endswith("/*"):
        base = pattern[:-2]
        return path == base or path.startswith(base + "/")
    if pattern.endswith("*"):
        return path.startswith(pattern[:-1])
    return path == pattern


def observe_targets(pattern: str, known_paths: list[str]) -> list[str]:
    """What to send Observe to for a subscription pattern: '/3303/*' observes '/3303' (the device answers
    with TLV of the whole object, spec §2.1); '/33*' observes each known resource it matches."""
    if pattern.endswith("/*"):
        return [pattern[:-2]]
    if pattern.endswith("*"):
        return [path for path in known_paths if matches(pattern, path)]
    return [pattern]


def name_matches(pattern: str | None, value: str) -> bool:
    """Presubscription endpoint-name / endpoint-type match: exact, or prefix when ending in '*'."""
    if pattern is None or pattern == "":
        return True
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    return value == pattern
