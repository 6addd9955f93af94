"""The publish path: one encoding per distinct options, one uid per event, keys and accounts routed."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable

import msgspec
from channel_fakes import make_channel, note

from devicehub.channels.encode import EventEncoder
from devicehub.channels.options import ChannelOptions
from devicehub.channels.publish import Publisher
from devicehub.channels.registry import ChannelRegistry
from devicehub.clock import ManualClock
from devicehub.domain.events import DeregistrationEvent, Event


class CountingEncoder(EventEncoder):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def encode(self, event: Event, options: ChannelOptions, queued_at_ms: int, uid: str | None) -> bytes:
        self.calls += 1
        return super().encode(event, options, queued_at_ms, uid)


def publisher(registry: ChannelRegistry, encoder: EventEncoder | None = None, **kwargs: object) -> Publisher:
    uids = (f"uid-{n}" for n in itertools.count(1))
    return Publisher(registry, ManualClock(), encoder or EventEncoder(), lambda: next(uids), **kwargs)  # type: ignore[arg-type]


def queued(channel_queue_snapshot: list[tuple[int, bytes, int]]) -> list[dict[str, object]]:
    return [msgspec.json.decode(data) for _, data, _ in channel_queue_snapshot]


def test_channels_with_equal_options_share_one_encoding() -> None:
    registry = ChannelRegistry()
    encoder = CountingEncoder()
    for key in ("k1", "k2", "k3"):
        registry.add(make_channel(key))
    registry.add(make_channel("k4", options=ChannelOptions(include_timestamp=True)))
    asyncio.run(publisher(registry, encoder).publish_many([(["k1", "k2", "k3", "k4"], note(1))]))
    assert encoder.calls == 2
    assert all(len(c.queue) == 1 for c in registry)


def test_one_uid_serves_every_channel_of_an_event_and_the_next_event_gets_another() -> None:
    registry = ChannelRegistry()
    for key in ("k1", "k2"):
        registry.add(make_channel(key, options=ChannelOptions(include_uid=True)))
    asyncio.run(publisher(registry).publish_many([(["k1", "k2"], note(1)), (["k1"], note(2))]))
    first = queued(registry.get("k1").queue.snapshot())  # type: ignore[union-attr]
    second = queued(registry.get("k2").queue.snapshot())  # type: ignore[union-attr]
    assert [e["uid"] for e in first] == ["uid-1", "uid-2"] and [e["uid"] for e in second] == ["uid-1"]


def test_keys_without_a_channel_store_nothing() -> None:
    registry = ChannelRegistry()
    registry.add(make_channel("k1"))
    asyncio.run(publisher(registry).publish_many([(["nobody"], note(1)), (["nobody", "k1"], note(2))]))
    assert len(registry.get("k1").queue) == 1  # type: ignore[union-attr]


def test_lifecycle_events_reach_every_channel_of_the_account_only() -> None:
    registry = ChannelRegistry()
    registry.add(make_channel("k1", account_id="acme"))
    registry.add(make_channel("k2", account_id="acme"))
    registry.add(make_channel("k3", account_id="other"))
    event = DeregistrationEvent(device_id="d" * 32, endpoint_name="node-1")
    asyncio.run(publisher(registry).publish_account("acme", event))
    assert [len(c.queue) for c in registry.channels()] == [1, 1, 0]


def test_in_redis_mode_events_are_forwarded_not_queued_here() -> None:
    registry = ChannelRegistry()
    registry.add(make_channel("k1", account_id="acme"))
    forwarded: list[tuple[list[str], Event]] = []

    async def forward(key_ids: Iterable[str], event: Event) -> None:
        forwarded.append((list(key_ids), event))

    def accounts(account_id: str) -> list[str]:
        return ["k1", "k9"] if account_id == "acme" else []

    async def main() -> None:
        p = publisher(registry, forward=forward, accounts=accounts)
        await p.publish_many([(["k1"], note(1))])
        await p.publish_account("acme", DeregistrationEvent(device_id="d" * 32, endpoint_name="node-1"))

    asyncio.run(main())
    assert [keys for keys, _ in forwarded] == [["k1"], ["k1", "k9"]]
    assert len(registry.get("k1").queue) == 0  # type: ignore[union-attr]
