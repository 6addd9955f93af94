"""Device, account and request ids (issues 15, 16 #1): read from the system generator many at a time, each its own."""

from __future__ import annotations

import re

from devicehub.ids import IdSource


def test_ids_are_32_hex_digits_and_distinct_across_refills() -> None:
    source = IdSource(batch=4)
    ids = [source() for _ in range(41)]  # ten refills and a bit
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_device_ids_begin_with_the_milliseconds_so_ids_made_later_sort_later() -> None:
    """Issue 16: ids made together sort together (the store's B-trees keyed by device id grow at one edge); the
    rest is random, so an id is not guessable from its time."""
    now = [1_795_000_000_000]
    source = IdSource(batch=4, milliseconds=lambda: now[0])
    first = [source.ordered() for _ in range(10)]
    now[0] += 1
    later = source.ordered()
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in [*first, later])
    assert {i[:12] for i in first} == {f"{1_795_000_000_000:012x}"}
    assert len({i[12:] for i in first}) == len(first)
    assert later > max(first)
