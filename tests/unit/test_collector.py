"""The node's collector policy (issue 30 #2, collector.py): start-up's objects frozen, a young collection only after
`YOUNG_THRESHOLD` net allocations, not CPython's 700 — so what an event leaves alive for one flush interval is not
promoted — and cyclic garbage still collected. Each test puts the interpreter's policy back."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from devicehub import collector


@pytest.fixture
def settled() -> Iterator[list[int]]:
    """`collector.settle()` applied; yields the generations of the collections run since, in order."""
    thresholds = gc.get_threshold()
    runs: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    collector.settle()
    runs.clear()  # settle's own full pass
    gc.callbacks.append(count)
    try:
        yield runs
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_settle_freezes_what_exists_and_raises_only_the_young_threshold(settled: list[int]) -> None:
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == collector.YOUNG_THRESHOLD
    gc.set_threshold(700)  # what settle changed, against the interpreter's defaults for the rest
    assert gc.get_threshold()[1:] == (10, 10)


def test_objects_alive_for_a_while_set_off_no_collection_below_the_threshold_and_one_above(settled: list[int]) -> None:
    alive = [[] for _ in range(collector.YOUNG_THRESHOLD // 2)]  # a flush interval's worth of events, many times
    assert settled == []  # the default (700) ran dozens of young collections over these
    alive += [[] for _ in range(collector.YOUNG_THRESHOLD)]
    assert settled and settled[0] == 0
    del alive


def test_cyclic_garbage_made_after_settling_is_still_collected(settled: list[int]) -> None:
    class Node:
        other: Any = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2
