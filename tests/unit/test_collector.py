"""The garbage collector policy of a serving process (collector.py, issue 16): after each full pass its survivors are
frozen, so the next pass walks only what is new; garbage that forms afterwards is still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from devicehub.collector import SurvivorFreezer, cyclic_garbage, installed_freezer


class Node:
    def __init__(self) -> None:
        self.peer: Node | None = None


@pytest.fixture
def freezer() -> Iterator[SurvivorFreezer]:
    """A freezer installed for the test; the process's collector is left as it was found (nothing frozen)."""
    installed = SurvivorFreezer()
    installed.install()
    try:
        yield installed
    finally:
        installed.uninstall()
        gc.unfreeze()


def test_a_full_pass_freezes_its_survivors_and_is_counted(freezer: SurvivorFreezer) -> None:
    survivor = Node()
    gc.collect()
    assert freezer.full_collections == 1 and freezer.full_collection_seconds > 0
    assert gc.is_tracked(survivor) and freezer.frozen > 0
    assert survivor not in gc.get_objects(generation=2)  # frozen: out of every generation a pass walks
    gc.collect(generation=0)  # a young pass is not counted and freezes nothing new
    assert freezer.full_collections == 1


def test_a_cycle_that_forms_after_a_freeze_is_still_collected(freezer: SurvivorFreezer) -> None:
    gc.collect()
    first, second = Node(), Node()
    first.peer, second.peer = second, first
    gone = weakref.ref(first)
    del first, second
    assert gone() is not None  # only the cyclic collector can free it
    gc.collect()
    assert gone() is None


def test_the_installed_freezer_is_found_and_uninstalling_removes_it(freezer: SurvivorFreezer) -> None:
    assert installed_freezer() is freezer
    freezer.uninstall()
    assert installed_freezer() is None
    gc.collect()
    assert freezer.full_collections == 0  # no longer called
    freezer.install()  # the fixture uninstalls it


def test_cyclic_garbage_reports_a_cycle_freezing_kept_alive(freezer: SurvivorFreezer) -> None:
    first, second = Node(), Node()
    first.peer, second.peer = second, first
    gone = weakref.ref(first)
    gc.collect()  # the cycle is reachable now: it is frozen with the survivors
    del first, second
    gc.collect()
    assert gone() is not None  # the price documented in collector.py
    assert cyclic_garbage() >= 2
    assert gone() is None
