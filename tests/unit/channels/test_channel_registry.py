"""The registry of this node's channels: by key, by account, and by queued bytes."""

from __future__ import annotations

from channel_fakes import make_channel

from devicehub.channels.registry import ChannelRegistry


def test_a_channel_is_found_by_its_key_and_its_account() -> None:
    registry = ChannelRegistry()
    a, b = make_channel("k1", account_id="acme"), make_channel("k2", account_id="acme")
    registry.add(a)
    registry.add(b)
    assert registry.get("k1") is a and "k2" in registry and len(registry) == 2
    assert set(registry.of_account("acme")) == {a, b}
    assert list(registry.of_account("other")) == []


def test_a_discarded_channel_leaves_its_key_and_its_account() -> None:
    registry = ChannelRegistry()
    channel = make_channel("k1", account_id="acme")
    registry.add(channel)
    registry.discard(channel)
    assert registry.get("k1") is None and list(registry.of_account("acme")) == [] and len(registry) == 0


def test_discarding_a_replaced_channel_keeps_its_successor() -> None:
    registry = ChannelRegistry()
    old, new = make_channel("k1"), make_channel("k1")
    registry.add(old)
    registry.add(new)
    registry.discard(old)
    assert registry.get("k1") is new


def test_largest_queues_come_first() -> None:
    registry = ChannelRegistry()
    for key, events in (("small", 1), ("large", 5), ("none", 0)):
        channel = make_channel(key)
        for n in range(events):
            channel.push(1, b"x" * 10, n)
        registry.add(channel)
    assert [c.key_id for c in registry.largest_queues(2)] == ["large", "small"]
