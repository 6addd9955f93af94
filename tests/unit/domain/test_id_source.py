"""Device, account and request ids (issues 15, 16 #1): read from the system generator many at a time, each its own."""

from __future__ import annotations

import re

from devicehub.ids import IdSource


def test_ids_are_32_hex_digits_and_distinct_across_refills() -> None:
    source = IdSource(batch=4)
    ids = [source() for _ in range(41)]  # ten refills and a bit
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)
