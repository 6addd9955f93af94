"""devicehub.interning: equal values are one object, the table stays bounded (issue 16: memory per device)."""

from __future__ import annotations

from dataclasses import dataclass

from devicehub.interning import InternTable


@dataclass(frozen=True)
class Pair:
    a: str
    b: int


def test_equal_keys_give_one_object_and_make_runs_once_per_key() -> None:
    made: list[tuple[str, int]] = []

    def make(a: str, b: int) -> Pair:
        made.append((a, b))
        return Pair(a, b)

    table = InternTable(make)
    first = table.get(("/3/0/0", 1))
    assert table.get(("/3/0/0", 1)) is first
    assert table.get(("/3/0/1", 1)) == Pair("/3/0/1", 1) and table.get(("/3/0/1", 1)) is not first
    assert made == [("/3/0/0", 1), ("/3/0/1", 1)]


def test_a_full_table_starts_afresh_and_never_holds_more_than_its_capacity() -> None:
    table = InternTable(Pair, capacity=3)
    kept = [table.get((str(i), i)) for i in range(3)]
    assert len(table) == 3
    fresh = table.get(("3", 3))  # the fourth key: a new table
    assert len(table) == 1 and fresh == Pair("3", 3)
    again = table.get(("0", 0))  # known before the restart: an equal value, built again
    assert again == kept[0] and again is not kept[0]
    for i in range(1000):
        table.get((f"unique-{i}", i))
        assert len(table) <= 3
