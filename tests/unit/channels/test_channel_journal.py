"""The journal mirrors each queue: after a flush the stored events are exactly what is still undelivered."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from devicehub._core import EVENT_OVERHEAD_BYTES, KIND_NOTIFICATION, Batch
from devicehub.channels.channel import Channel, Counters
from devicehub.channels.journal import Journal
from devicehub.domain.model import ChannelConfig, ChannelDrops, StoredEvent

LIFETIME_MS = 24 * 3600 * 1000


class JournalStore:
    """The journal part of the Store protocol, kept in lists (the contract suite tests the real backends)."""

    def __init__(self) -> None:
        self.events: dict[str, list[StoredEvent]] = {}
        self.drops: dict[str, ChannelDrops] = {}
        self.fail_next = False
        self.appended = 0  # events ever written

    async def add_channel_drops(self, key_id: str, drops: ChannelDrops) -> None:
        self.drops[key_id] = self.drops.get(key_id, ChannelDrops()) + drops

    async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk full")
        self.events.setdefault(key_id, []).extend(events)
        self.appended += len(events)

    async def load_events(self, key_id: str) -> list[StoredEvent]:
        return list(self.events.get(key_id, []))

    async def drop_head_events(self, key_id: str, count: int) -> None:
        del self.events.setdefault(key_id, [])[:count]

    async def delete_channel(self, key_id: str) -> bool:
        return self.events.pop(key_id, None) is not None


_JOURNALS: dict[int, Journal] = {}  # the journal each channel was made with, by the channel's identity


def make_channel(store: JournalStore, max_bytes: int = 10**9) -> Channel:
    config = ChannelConfig(key_id="k1", account_id="a1", kind="callback", created_at=0.0)
    journal = Journal(store, 0.1)  # type: ignore[arg-type]  # only the journal methods are used
    channel = Channel(config, journal, Counters(), 0.0, max_bytes=max_bytes)
    _JOURNALS[id(channel)] = journal
    return channel


def undelivered(channel: Channel, out: Batch | None) -> list[StoredEvent]:
    head = [StoredEvent(*e) for e in out.events()] if out is not None else []
    return head + [StoredEvent(*e) for e in channel.queue.snapshot()]


def journal_of(channel: Channel) -> Journal:
    return _JOURNALS[id(channel)]


def check(store: JournalStore, channel: Channel, out: Batch | None) -> None:
    stored = store.events.get("k1", [])
    if out is None:
        assert stored == undelivered(channel, None)
    else:
        # events the cap or the lifetime dropped from behind the batch stay stored until the batch settles
        behind = channel._behind
        expected = undelivered(channel, out)
        assert stored[: out.count] == expected[: out.count]
        assert stored[out.count + behind :] == expected[out.count :]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(1, 40)),
        st.tuples(st.just("push"), st.integers(1, 40)),
        st.tuples(st.just("take"), st.just(0)),
        st.tuples(st.just("deliver"), st.just(0)),
        st.tuples(st.just("give_back"), st.just(0)),
        st.tuples(st.just("discard"), st.just(0)),
        st.tuples(st.just("age"), st.integers(1, LIFETIME_MS // 2)),
        st.tuples(st.just("flush"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_stored_journal_equals_undelivered_events_after_any_operations(steps: list[tuple[str, int]]) -> None:
    async def main() -> None:
        store = JournalStore()
        # a small cap so that overflow happens, also behind a batch that is out
        channel = make_channel(store, max_bytes=2 * (EVENT_OVERHEAD_BYTES + 40))
        now_ms = 0
        out: Batch | None = None
        serial = 0
        for op, arg in steps:
            if op == "push":
                serial += 1
                channel.push(KIND_NOTIFICATION, b'"%d"' % serial + b" " * arg, now_ms)
            elif op == "take" and out is None:
                out = channel.take(now_ms)
            elif op == "deliver" and out is not None:
                channel.delivered(out, now_ms / 1000)
                out = None
            elif op == "give_back" and out is not None:
                channel.give_back(out)
                out = None
            elif op == "discard" and out is not None:
                channel.discard(out)
                out = None
            elif op == "age":
                now_ms += arg
                channel.expire(now_ms)
            elif op == "flush":
                await journal_of(channel).flush()
                check(store, channel, out)
        if out is not None:
            channel.give_back(out)
        await journal_of(channel).flush()
        check(store, channel, None)
        # the lost-event counters reach the store as the channel counts them
        status = channel.status()
        lost = ChannelDrops(status.dropped_overflow, status.dropped_expired, status.dropped_failed)
        assert store.drops.get("k1", ChannelDrops()) == lost

    asyncio.run(main())


def test_overflow_behind_a_batch_that_comes_back_rewrites_the_journal() -> None:
    async def main() -> None:
        store = JournalStore()
        channel = make_channel(store, max_bytes=3 * (EVENT_OVERHEAD_BYTES + 8))
        for n in range(3):
            channel.push(KIND_NOTIFICATION, b"%08d" % n, 0)
        out = channel.take(0)
        assert out is not None and out.count == 3
        for n in range(3, 8):  # the cap drops 3 and 4, queued behind the batch that is out
            channel.push(KIND_NOTIFICATION, b"%08d" % n, 0)
        await journal_of(channel).flush()
        channel.give_back(out)  # the cap now drops the oldest of the batch as well
        await journal_of(channel).flush()
        assert store.events["k1"] == undelivered(channel, None)
        assert [e.data for e in store.events["k1"]] == [b"%08d" % n for n in (5, 6, 7)]

    asyncio.run(main())


def test_events_delivered_within_the_flush_interval_are_never_written() -> None:
    """Issue 15: only what is still queued when the flush runs is journaled; the stored journal stays exact."""

    async def main() -> None:
        store = JournalStore()
        channel = make_channel(store)
        for n in range(5):
            channel.push(KIND_NOTIFICATION, b"%d" % n, 0)
        await journal_of(channel).flush()  # 0-4 still queued: written
        assert store.appended == 5
        for n in range(5, 12):
            channel.push(KIND_NOTIFICATION, b"%d" % n, 0)
        batch = channel.take(0)  # 0-11 go out and are delivered before the next flush
        assert batch is not None and batch.count == 12
        channel.delivered(batch, 0.0)
        channel.push(KIND_NOTIFICATION, b"12", 0)
        await journal_of(channel).flush()
        assert store.appended == 5 + 1  # 5-11 never reached the store; 12 is still queued, so it did
        assert store.events["k1"] == [StoredEvent(KIND_NOTIFICATION, b"12", 0)] == undelivered(channel, None)

    asyncio.run(main())


def test_failed_flush_is_retried_without_loss_or_repeats() -> None:
    async def main() -> None:
        store = JournalStore()
        channel = make_channel(store)
        for n in range(3):
            channel.push(KIND_NOTIFICATION, b"%d" % n, 0)
        store.fail_next = True
        try:
            await journal_of(channel).flush()
        except OSError:
            pass
        else:
            raise AssertionError("the store failure should surface")
        channel.push(KIND_NOTIFICATION, b"3", 0)
        batch = channel.take(0)
        assert batch is not None
        channel.delivered(batch, 0.0)
        channel.push(KIND_NOTIFICATION, b"4", 0)
        await journal_of(channel).flush()
        assert store.events["k1"] == [StoredEvent(KIND_NOTIFICATION, b"4", 0)]

    asyncio.run(main())


def test_forget_drops_pending_and_stored_events() -> None:
    async def main() -> None:
        store = JournalStore()
        channel = make_channel(store)
        channel.push(KIND_NOTIFICATION, b"1", 0)
        await journal_of(channel).flush()
        channel.push(KIND_NOTIFICATION, b"2", 0)
        channel.close()
        await journal_of(channel).forget("k1")
        await journal_of(channel).flush()
        assert "k1" not in store.events
        assert journal_of(channel).pending_events == 0

    asyncio.run(main())


def test_stop_during_a_flush_writes_each_event_once() -> None:
    """A stop used to cancel the flusher mid-write; the store (a thread) finished the write anyway, uncounted, and
    the final flush wrote the same events again: a restart then delivered them twice."""

    class SlowStore(JournalStore):
        def __init__(self) -> None:
            super().__init__()
            self.writing = asyncio.Event()
            self.release = asyncio.Event()

        async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None:
            async def write() -> None:  # like a store's executor thread: carries on when its caller is cancelled
                self.writing.set()
                await self.release.wait()
                await JournalStore.append_events(self, key_id, events)

            await asyncio.shield(write())

    async def main() -> None:
        store = SlowStore()
        journal = Journal(store, 0.001)  # type: ignore[arg-type]
        journal.append("k1", StoredEvent(KIND_NOTIFICATION, b"1", 0))
        journal.start()
        await store.writing.wait()
        stopping = asyncio.ensure_future(journal.stop())  # while the write is out
        store.release.set()
        await stopping
        assert [e.data for e in store.events["k1"]] == [b"1"]

    asyncio.run(asyncio.wait_for(main(), 10))
