"""The pattern index answers exactly what matching every pattern one by one answers (issue 14.7)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from devicehub.domain.paths import matches
from devicehub.domain.pattern_index import PathSet, PatternIndex, ancestors_or_self

segment = st.sampled_from(["3", "33", "3303", "0", "1", "5700", "57"])
path = st.lists(segment, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))
pattern = st.one_of(
    path,
    path.map(lambda p: p + "/*"),
    path.map(lambda p: p + "*"),
    st.just("/*"),
)
owners = st.sampled_from(["k1", "k2", "k3"])


def test_ancestors_or_self_lists_the_root_and_every_level() -> None:
    assert ancestors_or_self("/3303/0/5700") == ["", "/3303", "/3303/0", "/3303/0/5700"]
    assert ancestors_or_self("/3") == ["", "/3"]


@given(st.lists(st.tuples(owners, pattern), max_size=12), path)
def test_owners_are_the_owners_of_every_matching_pattern(items: list[tuple[str, str]], probe: str) -> None:
    index = PatternIndex(items)
    assert set(index.owners(probe)) == {owner for owner, p in items if matches(p, probe)}
    assert len(index.owners(probe)) == len(set(index.owners(probe)))


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


@given(st.lists(path, max_size=12), path, st.text(alphabet="/0357", max_size=6))
def test_path_set_answers_as_a_scan_of_the_paths(paths: list[str], base: str, prefix: str) -> None:
    announced = PathSet(paths)
    assert announced.related(base) == any(_related(p, base) for p in paths)
    assert announced.with_prefix(prefix) == sorted({p for p in paths if p.startswith(prefix)})
