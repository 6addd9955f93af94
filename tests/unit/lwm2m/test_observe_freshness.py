"""RFC 7641 §4.4, stated once: the one freshness rule (the Rust lane's, `_core.observe_newer`) that both the lane and
the Python notification path apply, checked against the RFC's text (issue 29 #6)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from devicehub._core import observe_newer

FRESHNESS = 128.0  # RFC 7641 §4.4: "128 seconds"
numbers = st.integers(min_value=0, max_value=(1 << 24) - 1)  # the Observe option carries 24 bits
times = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


def rfc_7641_fresher(v1: int, t1: float, v2: int, t2: float) -> bool:
    """RFC 7641 §4.4: "the incoming notification was sent later than [the latest one] if
    (V1 < V2 and V2 - V1 < 2^23) or (V1 > V2 and V1 - V2 > 2^23) or (T2 > T1 + 128 seconds)"."""
    return (v1 < v2 and v2 - v1 < 2**23) or (v1 > v2 and v1 - v2 > 2**23) or (t2 > t1 + FRESHNESS)


@given(numbers, times, numbers, st.floats(min_value=0.0, max_value=1e3, allow_nan=False))
def test_a_notification_is_newer_exactly_when_rfc_7641_says_so(v1: int, t1: float, v2: int, later: float) -> None:
    t2 = t1 + later
    assert observe_newer(v1, t1, v2, t2, FRESHNESS) == rfc_7641_fresher(v1, t1, v2, t2)


@given(numbers, times)
def test_the_first_number_of_a_stream_is_always_taken(v2: int, t2: float) -> None:
    assert observe_newer(None, 0.0, v2, t2, FRESHNESS)


def test_the_rule_at_its_edges() -> None:
    assert observe_newer(5, 0.0, 6, 1.0, FRESHNESS)
    assert not observe_newer(6, 0.0, 5, 1.0, FRESHNESS)  # older
    assert not observe_newer(6, 0.0, 6, 1.0, FRESHNESS)  # the same number again
    assert not observe_newer(0, 0.0, 2**23, 1.0, FRESHNESS)  # exactly half the space ahead: not newer
    assert observe_newer(2**23 + 1, 0.0, 0, 1.0, FRESHNESS)  # wrapped around
    assert not observe_newer(6, 0.0, 5, FRESHNESS, FRESHNESS)  # 128 s exactly: still judged by number
    assert observe_newer(6, 0.0, 5, FRESHNESS + 0.001, FRESHNESS)  # later than 128 s: any number is newer
