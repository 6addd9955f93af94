"""Notification channels and their event journals on both stores."""

from __future__ import annotations

from devicehub.domain.model import (
    ChannelConfig,
    ChannelDrops,
    StoredEvent,
)
from devicehub.domain.storage.store import Store
from support.stores import A, B, StoreFactory, run


def test_channel_replace_and_delete_takes_its_events(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_channel(ChannelConfig(key_id="k1", account_id=A, kind="websocket", created_at=1.0))
        await store.put_channel(
            ChannelConfig(
                key_id="k1", account_id=A, kind="callback", url="https://x", headers={"a": "b"}, created_at=2.0
            )
        )
        await store.put_channel(ChannelConfig(key_id="k2", account_id=B, kind="pull", created_at=1.0))
        channel = await store.get_channel("k1")
        assert channel is not None and channel.kind == "callback" and channel.headers == {"a": "b"}
        assert [c.key_id for c in await store.list_channels()] == ["k1", "k2"]
        assert [c.key_id for c in await store.list_channels(B)] == ["k2"]
        await store.append_events("k1", [StoredEvent(0, b"{}", 1)])
        assert await store.delete_channel("k1")
        assert not await store.delete_channel("k1")
        assert await store.load_events("k1") == [] and await store.get_channel("k1") is None

    run(make_store, scenario)


def test_channel_drop_counters_add_up_and_go_with_the_channel(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        assert await store.get_channel_drops("k1") == ChannelDrops()
        await store.put_channel(ChannelConfig(key_id="k1", account_id=A, kind="websocket", created_at=1.0))
        await store.add_channel_drops("k1", ChannelDrops(overflow=3))
        await store.add_channel_drops("k1", ChannelDrops(overflow=1, expired=2, failed=5))
        await store.add_channel_drops("k2", ChannelDrops(failed=1))
        assert await store.get_channel_drops("k1") == ChannelDrops(overflow=4, expired=2, failed=5)
        assert await store.delete_channel("k1")
        assert await store.get_channel_drops("k1") == ChannelDrops()
        assert await store.get_channel_drops("k2") == ChannelDrops(failed=1)

    run(make_store, scenario)


def test_event_journal_appends_at_the_tail_and_drops_from_the_head(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.append_events("k1", [StoredEvent(0, f"{n}".encode(), n) for n in range(3)])
        await store.append_events("k1", [StoredEvent(5, b"3", 3)])
        await store.drop_head_events("k1", 2)
        assert await store.load_events("k1") == [StoredEvent(0, b"2", 2), StoredEvent(5, b"3", 3)]
        await store.drop_head_events("k1", 10)
        assert await store.load_events("k1") == []

    run(make_store, scenario)
