"""The expiry heap (issue 16 #3): due entries come out in time order; superseded ones are dropped lazily."""

from __future__ import annotations

from devicehub.lwm2m.expiry import ExpiryHeap


def test_due_yields_only_current_entries_before_now_in_expiry_order() -> None:
    heap = ExpiryHeap()
    versions = {"a": 2.0, "b": 1.0, "c": 1.0}
    heap.push("a", 10.0, 1.0)  # superseded by the update below
    heap.push("b", 12.0, 1.0)
    heap.push("c", 11.0, 1.0)
    heap.push("a", 30.0, 2.0)
    assert list(heap.due(11.0, versions.get)) == []  # strictly before now
    assert list(heap.due(12.5, versions.get)) == ["c", "b"]
    del versions["a"]  # gone (deregistered) before its time
    assert list(heap.due(100.0, versions.get)) == [] and len(heap) == 0


def test_compact_drops_superseded_entries_once_they_dominate() -> None:
    heap = ExpiryHeap()
    for version in range(3000):  # one device updated 3 000 times
        heap.push("a", 100.0 + version, float(version))
    heap.compact(1, iter([("a", 3099.0, 2999.0)]))
    assert len(heap) == 1
    assert list(heap.due(5000.0, {"a": 2999.0}.get)) == ["a"]
