"""The channel queue binding in devicehub._core: ChannelQueue, Batch and the queue constants.

The queue itself is tested in rust/codec/src/queue/tests.rs; these tests check what Python sees: byte
accounting, the cap, the lifetime on a passed-in clock, NotificationMessage bodies (wire-format.md)
and the errors the binding adds.
"""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devicehub._core import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_LIFETIME_MS,
    DEFAULT_MAX_BYTES,
    EVENT_OVERHEAD_BYTES,
    KIND_ASYNC_RESPONSE,
    KIND_DE_REGISTRATION,
    KIND_NOTIFICATION,
    KIND_REG_UPDATE,
    KIND_REGISTRATION,
    KIND_REGISTRATIONS_EXPIRED,
    MAX_CHUNK_SIZE,
    Batch,
    ChannelQueue,
    CoreError,
    QueueError,
)

# wire-format.md "NotificationMessage": the array of each kind, in key order
ARRAYS = {
    KIND_NOTIFICATION: "notifications",
    KIND_REGISTRATION: "registrations",
    KIND_REG_UPDATE: "reg-updates",
    KIND_DE_REGISTRATION: "de-registrations",
    KIND_REGISTRATIONS_EXPIRED: "registrations-expired",
    KIND_ASYNC_RESPONSE: "async-responses",
}


def note(n: int) -> bytes:
    return b'{"ep":"dev","path":"/3303/0/5700","n":%d}' % n


def cost(event: bytes) -> int:
    return len(event) + EVENT_OVERHEAD_BYTES


def take(queue: ChannelQueue, max_items: int = DEFAULT_CHUNK_SIZE, now_ms: int = 0) -> Batch:
    batch = queue.take_batch(max_items, now_ms)
    assert batch is not None
    return batch


def test_constants_match_the_spec() -> None:
    assert list(ARRAYS) == [0, 1, 2, 3, 4, 5]
    assert DEFAULT_MAX_BYTES == 50 * 1024 * 1024  # spec §8
    assert DEFAULT_LIFETIME_MS == 24 * 3600 * 1000  # spec §6
    assert (DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE) == (10_000, 20_000)
    assert EVENT_OVERHEAD_BYTES > 0


def test_defaults_and_empty_queue() -> None:
    queue = ChannelQueue()
    assert (queue.max_bytes, queue.lifetime_ms) == (DEFAULT_MAX_BYTES, DEFAULT_LIFETIME_MS)
    assert len(queue) == 0 and queue.bytes_used == 0
    assert queue.take_batch(1, 0) is None
    assert (queue.dropped_overflow, queue.dropped_expired, queue.pushed_total) == (0, 0, 0)


@pytest.mark.parametrize("args", [(0, 1), (1, 0), (-1, 1), (1, -5)])
def test_invalid_limits_are_queue_errors(args: tuple[int, int]) -> None:
    with pytest.raises(QueueError):
        ChannelQueue(*args)


def test_queue_error_is_a_core_error() -> None:
    assert issubclass(QueueError, CoreError) and issubclass(QueueError, ValueError)


def test_bytes_used_counts_payload_plus_overhead() -> None:
    queue = ChannelQueue()
    events = [note(1), b'"device-1"', note(22)]
    for event in events:
        assert queue.push(KIND_NOTIFICATION, event, 0) == 0
    assert queue.bytes_used == sum(cost(e) for e in events)
    assert len(queue) == 3 and queue.pushed_total == 3


def test_cap_drops_the_oldest_and_counts_them() -> None:
    queue = ChannelQueue(max_bytes=3 * cost(note(1)))
    for n in range(1, 4):
        assert queue.push(KIND_NOTIFICATION, note(n), n) == 0
    assert queue.push(KIND_NOTIFICATION, note(4), 4) == 1
    assert [data for _, data, _ in queue.snapshot()] == [note(2), note(3), note(4)]
    assert queue.bytes_used == 3 * cost(note(1))
    assert queue.dropped_overflow == 1 and queue.pushed_total == 4


def test_an_event_larger_than_the_cap_is_refused_and_nothing_changes() -> None:
    queue = ChannelQueue(max_bytes=200)
    queue.push(KIND_NOTIFICATION, note(1), 0)
    with pytest.raises(QueueError):
        queue.push(KIND_NOTIFICATION, b"x" * (201 - EVENT_OVERHEAD_BYTES), 0)
    assert [data for _, data, _ in queue.snapshot()] == [note(1)]
    assert queue.pushed_total == 1 and queue.dropped_overflow == 0


@pytest.mark.parametrize("kind", [7, 255, 256, -1])  # 6: firmware-updates (issue 33)
def test_unknown_kind_is_a_queue_error(kind: int) -> None:
    queue = ChannelQueue()
    with pytest.raises(QueueError):
        queue.push(kind, note(1), 0)
    assert len(queue) == 0


def test_lifetime_expiry_follows_the_passed_in_clock() -> None:
    queue = ChannelQueue(lifetime_ms=1_000)
    queue.push(KIND_NOTIFICATION, note(1), 10_000)
    queue.push(KIND_NOTIFICATION, note(2), 10_600)
    assert queue.expire(10_999) == 0
    assert queue.expire(11_000) == 1  # age == lifetime: gone
    assert [at for _, _, at in queue.snapshot()] == [10_600]
    assert queue.take_batch(10, 11_600) is None  # take_batch expires first
    assert queue.dropped_expired == 2 and queue.bytes_used == 0


def test_what_the_cap_and_the_lifetime_removed_is_handed_back_once_with_its_cause() -> None:
    # issue 34 #5: the dead letters of every channel come from here
    queue = ChannelQueue(max_bytes=3 * cost(note(1)), lifetime_ms=1_000)
    for n in range(1, 5):
        queue.push(KIND_NOTIFICATION, note(n), n)
    queue.push(KIND_REGISTRATION, note(5), 1_002)  # the cap takes note 2; note 3 (queued at 3) expires by 1_003
    assert queue.take_batch(10, 1_003) is not None
    assert queue.take_dropped() == [
        (KIND_NOTIFICATION, note(1), 1, "byte_cap"),
        (KIND_NOTIFICATION, note(2), 2, "byte_cap"),
        (KIND_NOTIFICATION, note(3), 3, "lifetime"),
    ]
    assert queue.take_dropped() == []


def test_body_groups_by_kind_in_fixed_key_order_and_queue_order() -> None:
    queue = ChannelQueue()
    pushed = [
        (KIND_ASYNC_RESPONSE, b'{"id":"a1","status":200}'),
        (KIND_NOTIFICATION, note(1)),
        (KIND_DE_REGISTRATION, b'"dev-9"'),
        (KIND_REGISTRATION, b'{"ep":"dev-2"}'),
        (KIND_NOTIFICATION, note(2)),
        (KIND_ASYNC_RESPONSE, b'{"id":"a2","status":404}'),
    ]
    for kind, data in pushed:
        queue.push(kind, data, 7)
    batch = take(queue)
    assert batch.count == 6 and len(queue) == 0 and queue.bytes_used == 0
    assert batch.body == (
        b'{"notifications":[' + note(1) + b"," + note(2) + b'],"registrations":[{"ep":"dev-2"}],'
        b'"de-registrations":["dev-9"],"async-responses":[{"id":"a1","status":200},{"id":"a2","status":404}]}'
    )
    body = json.loads(batch.body)
    assert list(body) == ["notifications", "registrations", "de-registrations", "async-responses"]
    assert batch.events() == [(kind, data, 7) for kind, data in pushed]


@pytest.mark.parametrize("max_items", [1, DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE])
def test_take_batch_takes_at_most_max_items_from_the_head(max_items: int) -> None:
    queue = ChannelQueue()
    for n in range(MAX_CHUNK_SIZE + 1):
        queue.push(KIND_NOTIFICATION, b"%d" % n, 0)
    batch = take(queue, max_items)
    assert batch.count == max_items
    assert json.loads(batch.body) == {"notifications": list(range(max_items))}
    assert len(queue) == MAX_CHUNK_SIZE + 1 - max_items


@pytest.mark.parametrize("max_items", [0, -1, MAX_CHUNK_SIZE + 1])
def test_take_batch_rejects_sizes_outside_1_to_20000(max_items: int) -> None:
    queue = ChannelQueue()
    queue.push(KIND_NOTIFICATION, note(1), 0)
    with pytest.raises(QueueError):
        queue.take_batch(max_items, 0)
    assert len(queue) == 1


def test_put_back_returns_the_batch_to_the_head_with_its_timestamps() -> None:
    queue = ChannelQueue()
    for n in range(5):
        queue.push(KIND_NOTIFICATION, note(n), 100 + n)
    before = queue.snapshot()
    batch = take(queue, 3, 200)
    queue.push(KIND_REG_UPDATE, b'{"ep":"late"}', 300)
    assert queue.put_back(batch) == 0
    assert queue.snapshot() == [*before, (KIND_REG_UPDATE, b'{"ep":"late"}', 300)]
    assert queue.bytes_used == sum(cost(data) for _, data, _ in queue.snapshot())
    assert queue.pushed_total == 6  # putting back is not pushing


def test_put_back_over_the_cap_drops_the_oldest_which_are_the_returned_events() -> None:
    queue = ChannelQueue(max_bytes=2 * cost(note(1)))
    queue.push(KIND_NOTIFICATION, note(1), 0)
    queue.push(KIND_NOTIFICATION, note(2), 0)
    batch = take(queue)
    queue.push(KIND_NOTIFICATION, note(3), 0)
    assert queue.put_back(batch) == 1
    assert [data for _, data, _ in queue.snapshot()] == [note(2), note(3)]
    assert queue.dropped_overflow == 1


def test_a_batch_can_be_put_back_only_once() -> None:
    queue = ChannelQueue()
    queue.push(KIND_NOTIFICATION, note(1), 0)
    batch = take(queue)
    queue.put_back(batch)
    with pytest.raises(QueueError):
        queue.put_back(batch)
    assert len(queue) == 1
    assert batch.count == 1 and json.loads(batch.body) == {"notifications": [json.loads(note(1))]}


def test_clear_empties_and_reports_the_count() -> None:
    queue = ChannelQueue()
    for n in range(4):
        queue.push(KIND_NOTIFICATION, note(n), 0)
    assert queue.clear() == 4
    assert len(queue) == 0 and queue.bytes_used == 0 and queue.take_batch(1, 0) is None


events_strategy = st.lists(
    st.tuples(st.sampled_from(list(ARRAYS)), st.text(max_size=20)),
    min_size=1,
    max_size=40,
)


@given(events=events_strategy, max_items=st.integers(1, 50))
def test_body_is_the_naive_grouping_and_take_then_put_back_is_identity(
    events: list[tuple[int, str]], max_items: int
) -> None:
    queue = ChannelQueue()
    for at, (kind, text) in enumerate(events):
        queue.push(kind, json.dumps({"at": at, "text": text}).encode(), at)
    before, used = queue.snapshot(), queue.bytes_used
    batch = take(queue, max_items, len(events))
    taken = before[:max_items]
    assert batch.events() == taken and batch.count == len(taken)
    expected = {
        name: [json.loads(data) for kind, data, _ in taken if kind == k]
        for k, name in ARRAYS.items()
        if any(kind == k for kind, _, _ in taken)
    }
    body = json.loads(batch.body)
    assert body == expected and list(body) == list(expected)
    assert queue.put_back(batch) == 0
    assert queue.snapshot() == before and queue.bytes_used == used
