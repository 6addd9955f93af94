"""Subscription patterns indexed by path, so matching costs the length of a path, not the number of patterns.

Three pattern shapes exist (domain/paths.py): exact ('/3303/0/5700'), subtree ('/3303/*': the path and everything
below it; '/*' is the whole device) and string prefix ('/33*'). A path is matched by looking up itself, its
ancestors and its string prefixes, never by scanning every pattern: a key with thousands of rules against a
device with thousands of resources stays cheap (issue 14.7).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence


def ancestors_or_self(path: str) -> list[str]:
    """'/3303/0/5700' → ['', '/3303', '/3303/0', '/3303/0/5700'] ('' is the device root, base of '/*')."""
    found = [""]
    index = path.find("/", 1)
    while index != -1:
        found.append(path[:index])
        index = path.find("/", index + 1)
    if path:
        found.append(path)
    return found


class PatternIndex:
    """(owner, pattern) pairs, answering which owners' patterns match a path."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._exact: dict[str, list[str]] = {}
        self._subtree: dict[str, list[str]] = {}
        self._prefix: dict[str, list[str]] = {}
        self._prefix_lengths: set[int] = set()
        for owner, pattern in items:
            self.add(owner, pattern)

    def add(self, owner: str, pattern: str) -> None:
        if pattern.endswith("/*"):
            self._subtree.setdefault(pattern[:-2], []).append(owner)
        elif pattern.endswith("*"):
            self._prefix.setdefault(pattern[:-1], []).append(owner)
            self._prefix_lengths.add(len(pattern) - 1)
        else:
            self._exact.setdefault(pattern, []).append(owner)

    def owners(self, path: str) -> tuple[str, ...]:
        """Every owner with a pattern matching `path`, each once, in a stable order."""
        found: dict[str, None] = dict.fromkeys(self._exact.get(path, ()))
        if self._subtree:
            for base in ancestors_or_self(path):
                found.update(dict.fromkeys(self._subtree.get(base, ())))
        for length in sorted(self._prefix_lengths):
            if length > len(path):
                break
            found.update(dict.fromkeys(self._prefix.get(path[:length], ())))
        return tuple(found)


class PathSet:
    """The paths a registration announced, answering 'is anything here at, above or below this path?'."""

    def __init__(self, paths: Sequence[str]) -> None:
        self._paths = set(paths)
        self._covered = {a for p in paths for a in ancestors_or_self(p)}
        self._sorted = sorted(self._paths)

    def related(self, base: str) -> bool:
        """Some path equals `base`, lies below it, or is one of its ancestors."""
        return base in self._covered or any(a in self._paths for a in ancestors_or_self(base))

    def with_prefix(self, prefix: str) -> list[str]:
        start = bisect.bisect_left(self._sorted, prefix)
        found = []
        for path in self._sorted[start:]:
            if not path.startswith(prefix):
                break
            found.append(path)
        return found
