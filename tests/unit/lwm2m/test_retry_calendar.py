"""The retry calendar (issue 16 #2): a shed Register's Max-Age books the first second with room, each second
filled up to the node's admission rate and a quarter more, so a storm's retries come back as fast as the node
takes them."""

from __future__ import annotations

from collections import Counter

from devicehub.lwm2m.retry_calendar import RetryCalendar

T0 = 1_800_000_000.0


def test_sheds_fill_each_second_up_to_the_admission_rate_and_a_quarter_from_the_soonest_on() -> None:
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10)
    for _ in range(500):  # 500 admitted in the second before the storm's sheds
        calendar.admitted(T0 - 0.5)
    returns = Counter(calendar.retry_after(T0 + 0.25) for _ in range(1_800))
    assert returns == {2: 625, 3: 625, 4: 550}


def test_the_rate_is_what_the_node_admits_now_when_more_than_in_the_last_second() -> None:
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10)
    for _ in range(2_000):  # a storm's first second: the backlog filled before the first shed
        calendar.admitted(T0 + 0.1)
    assert Counter(calendar.retry_after(T0 + 0.2) for _ in range(3_000)) == {2: 2_500, 3: 500}


def test_a_node_that_admitted_few_books_at_the_floor_rate() -> None:
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10)
    calendar.admitted(T0)
    assert Counter(calendar.retry_after(T0) for _ in range(35)) == {2: 10, 3: 10, 4: 10, 5: 5}


def test_later_sheds_book_after_the_earlier_ones_and_past_seconds_are_forgotten() -> None:
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10)
    first = [calendar.retry_after(T0) for _ in range(30)]  # seconds T0+2 .. T0+4 full
    assert sorted(set(first)) == [2, 3, 4]
    assert calendar.retry_after(T0 + 1) == 4  # T0+5 is the first second with room: 4 s from T0+1
    assert calendar.booked == 31
    assert calendar.retry_after(T0 + 10) == 2  # every booked second has passed
    assert calendar.booked == 1


def test_when_every_second_up_to_the_latest_is_full_the_latest_is_told() -> None:
    calendar = RetryCalendar(least_s=2, most_s=6, min_rate=1)
    assert [calendar.retry_after(T0) for _ in range(6)] == [2, 3, 4, 5, 6, 6]


def test_the_rate_is_the_most_admitted_in_a_second_over_the_last_minute() -> None:
    """While the node sheds, only booked devices arrive: its admissions show the booking rate, not what it can take.
    A rate read from the last second alone fell with each round of bookings (100 000 offered at 4 000/s: 750/s)."""
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10)
    for _ in range(2_000):
        calendar.admitted(T0)
    for second in range(1, 30):  # a slow half-minute: few admitted
        calendar.admitted(T0 + second)
    assert Counter(calendar.retry_after(T0 + 30) for _ in range(3_000)) == {2: 2_500, 3: 500}
    for second in range(31, 92):  # a minute later the peak is forgotten
        calendar.admitted(T0 + second)
    assert Counter(calendar.retry_after(T0 + 92) for _ in range(25)) == {2: 10, 3: 10, 4: 5}


def test_overbooked_returns_the_node_takes_raise_the_rate_the_next_ones_are_booked_at() -> None:
    """Booked at exactly its peak, a node admits exactly its bookings and its peak never rises, however much more it
    could take once a storm's fresh Registers stop (100 000 offered at 4 000/s returned at ~1 000/s for a minute)."""
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10)
    for _ in range(800):  # what the node admitted while it was also shedding
        calendar.admitted(T0)
    assert Counter(calendar.retry_after(T0 + 0.5) for _ in range(1_000)) == {2: 1_000}
    for _ in range(1_000):  # the booked second: it took all of them
        calendar.admitted(T0 + 2.5)
    assert Counter(calendar.retry_after(T0 + 2.6) for _ in range(1_250)) == {2: 1_250}


def test_no_second_is_booked_beyond_what_the_backlog_holds() -> None:
    """A node that admitted 4 000 in a second would book 5 000 returns a second; with a backlog of 2 000 the
    returns of one second, which come back together, fit the backlog, and the rest go to later seconds."""
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10, most_per_second=2_000)
    for _ in range(4_000):
        calendar.admitted(T0 + 0.1)
    assert Counter(calendar.retry_after(T0 + 0.2) for _ in range(5_000)) == {2: 2_000, 3: 2_000, 4: 1_000}


def test_once_registrations_are_stored_the_rate_is_what_the_node_stores_not_the_backlog_it_admitted_at_once() -> None:
    """issue 30 #4: a storm's first second admits the whole backlog; booked at that rate, the returns beyond what the
    node drains were shed again (10 000 offered at 4× capacity: 31 389 sheds for 10 000 devices)."""
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10, most_per_second=2_000)
    for _ in range(2_000):
        calendar.admitted(T0 + 0.1)
    calendar.stored(T0 + 0.9, 800)
    calendar.stored(T0 + 1.5, 800)
    assert calendar.rate(T0 + 2.2) == 1_000  # 800 a second stored, a quarter more
    assert Counter(calendar.retry_after(T0 + 2.2) for _ in range(2_500)) == {2: 1_000, 3: 1_000, 4: 500}


def test_a_batch_stored_in_one_lump_counts_over_the_seconds_it_took() -> None:
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10)
    calendar.admitted(T0)  # the node started working then
    calendar.stored(T0 + 2.5, 2_400)  # one long batch ends
    assert calendar.rate(T0 + 3.1) == 1_000  # 2 400 over three seconds, a quarter more


def test_before_anything_is_stored_the_admissions_set_the_rate() -> None:
    calendar = RetryCalendar(least_s=2, most_s=120, min_rate=10)
    for _ in range(400):
        calendar.admitted(T0 + 0.5)
    assert calendar.rate(T0 + 0.6) == 500
