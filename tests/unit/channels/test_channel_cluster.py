"""The hub's cluster part on its own (issue 29 #10): events forwarded to the inboxes of channels the cluster knows,
inboxes drained into held channels, ownership taken and handed over; on a fake of the Redis link and of the store,
a manual clock and no socket. (Its polling and lease timers are real time by design: see ownership.py.)"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any, cast

import msgspec
from channel_fakes import START, note

from devicehub.channels.channel import Counters
from devicehub.channels.cluster import ClusterLink, ControlHandler
from devicehub.channels.encode import EventEncoder
from devicehub.channels.journal import Journal
from devicehub.channels.lifecycle import ChannelLifecycle, SocketTimers
from devicehub.channels.options import ChannelOptions
from devicehub.channels.ownership import ClusterOwnership
from devicehub.channels.registry import ChannelRegistry
from devicehub.clock import ManualClock
from devicehub.domain.model import ChannelConfig, ChannelDrops, StoredEvent
from devicehub.domain.storage.store import Store
from support.waiting import eventually

NODE = "node-a"
OTHER = "node-b"


class FakeLink:
    """The Redis side as a node sees it: inboxes per key, control messages sent and the handler that hears them."""

    def __init__(self, log: list[tuple[str, str]]) -> None:
        self.node_id = NODE
        self.inboxes: dict[str, list[StoredEvent]] = {}
        self.sent: list[tuple[str, str]] = []
        self.failures = 0  # forwards to fail before one goes through (Redis down)
        self.handler: ControlHandler | None = None
        self._log = log

    async def forward(self, batches: dict[str, list[StoredEvent]]) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("redis down")
        for key_id, events in batches.items():
            self.inboxes.setdefault(key_id, []).extend(events)

    async def peek(self, key_ids: Sequence[str]) -> dict[str, list[StoredEvent]]:
        return {k: list(self.inboxes[k]) for k in key_ids if self.inboxes.get(k)}

    async def trim(self, counts: dict[str, int]) -> None:
        for key_id, count in counts.items():
            del self.inboxes[key_id][:count]
            self._log.append(("trimmed", key_id))

    async def drop_inbox(self, key_id: str) -> None:
        self.inboxes.pop(key_id, None)

    async def send(self, verb: str, key_id: str) -> None:
        self.sent.append((verb, key_id))

    async def listen(self, handler: ControlHandler) -> None:
        self.handler = handler

    async def close(self) -> None:
        pass


class FakeChannelStore:
    """Channel configurations, leases and journals as the cluster part reads and writes them."""

    def __init__(self, log: list[tuple[str, str]]) -> None:
        self.channels: dict[str, ChannelConfig] = {}
        self.leases: dict[str, str] = {}
        self.events: dict[str, list[StoredEvent]] = {}
        self._log = log

    async def list_channels(self, account_id: str | None = None) -> list[ChannelConfig]:
        return list(self.channels.values())

    async def get_channel(self, key_id: str) -> ChannelConfig | None:
        return self.channels.get(key_id)

    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        return self.leases.setdefault(name, owner) == owner

    async def release_lease(self, name: str, owner: str) -> None:
        if self.leases.get(name) == owner:
            del self.leases[name]

    async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None:
        self.events.setdefault(key_id, []).extend(events)
        self._log.append(("journaled", key_id))

    async def drop_head_events(self, key_id: str, count: int) -> None:
        del self.events[key_id][:count]

    async def load_events(self, key_id: str) -> list[StoredEvent]:
        return list(self.events.get(key_id, []))

    async def get_channel_drops(self, key_id: str) -> ChannelDrops:
        return ChannelDrops()

    async def add_channel_drops(self, key_id: str, drops: ChannelDrops) -> None:
        pass


def config(key_id: str, kind: str = "callback", options: ChannelOptions | None = None) -> ChannelConfig:
    serialization = (options or ChannelOptions()).to_wire()
    return ChannelConfig(key_id=key_id, account_id="a1", kind=kind, serialization=serialization, created_at=START)


class Node:
    """One node's cluster part, wired to the fakes."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []  # journal writes and inbox trims, in order
        self.link, self.store = FakeLink(self.log), FakeChannelStore(self.log)
        self.clock, self.registry = ManualClock(), ChannelRegistry()
        store = cast(Store, self.store)
        journal = Journal(store, 1.0)
        timers = SocketTimers(ping_payload=lambda: b"p", ping_interval=30.0, pong_timeout=10.0, coalesce=0.0)
        lifecycle = ChannelLifecycle(
            store,
            self.clock,
            self.registry,
            journal,
            Counters(),
            queue_max_bytes=1 << 20,
            max_batch_bytes=None,
            sockets=timers,
        )
        uids = (f"uid-{n}" for n in itertools.count(1))
        self.ownership = ClusterOwnership(
            cast(ClusterLink, self.link),
            store,
            self.clock,
            self.registry,
            lifecycle,
            journal,
            EventEncoder(),
            lambda: next(uids),
        )


def payloads(events: list[StoredEvent]) -> list[Any]:
    return [msgspec.json.decode(e.data)["payload"] for e in events]


def test_an_event_goes_to_the_inbox_of_every_key_whose_channel_the_cluster_knows_and_no_other() -> None:
    async def main() -> None:
        node = Node()
        node.store.channels = {k: config(k) for k in ("k1", "k2")}
        await node.ownership.changed("k1")
        await node.ownership.forward(["k1", "k2", "unknown"], note(1))
        await eventually(lambda: len(node.link.inboxes) == 2)
        await node.ownership.stop_tasks()
        assert sorted(node.link.inboxes) == ["k1", "k2"]

    asyncio.run(main())


def test_a_change_refreshes_the_channels_known_and_tells_the_other_nodes() -> None:
    async def main() -> None:
        node = Node()
        assert not node.ownership.knows("k1")
        node.store.channels["k1"] = config("k1")  # set up through another node
        await node.ownership.changed("k1")
        assert node.ownership.knows("k1") and node.link.sent == [("changed", "k1")]

    asyncio.run(main())


def test_a_forward_that_fails_is_sent_again_with_its_events_ahead_of_newer_ones() -> None:
    async def main() -> None:
        node = Node()
        node.store.channels["k1"] = config("k1")
        await node.ownership.changed("k1")
        node.link.failures = 1
        await node.ownership.forward(["k1"], note(1))
        await node.ownership.forward(["k1"], note(2))
        await eventually(lambda: len(node.link.inboxes.get("k1", [])) == 2)
        await node.ownership.stop_tasks()
        assert payloads(node.link.inboxes["k1"]) == ["MQ==", "Mg=="]  # base64 of 1, 2: in their order

    asyncio.run(main())


def test_owning_a_free_channel_takes_its_lease_and_restores_its_journal() -> None:
    async def main() -> None:
        node = Node()
        node.store.channels["k1"] = config("k1")
        node.store.events["k1"] = [StoredEvent(1, b'{"payload":"MQ=="}', 0)]
        channel = await node.ownership.own("k1", take_over=False)
        assert channel is not None and node.registry.get("k1") is channel
        assert node.store.leases == {"channel:k1": NODE} and len(channel.queue) == 1

    asyncio.run(main())


def test_a_channel_another_node_holds_is_not_owned_without_a_take_over() -> None:
    async def main() -> None:
        node = Node()
        node.store.channels["k1"] = config("k1")
        node.store.leases["channel:k1"] = OTHER
        assert await node.ownership.own("k1", take_over=False) is None
        assert node.registry.get("k1") is None and node.link.sent == []

    asyncio.run(main())


def test_inbox_events_of_a_held_channel_are_queued_and_journaled_before_the_inbox_is_trimmed() -> None:
    async def main() -> None:
        node = Node()
        node.store.channels["k1"] = config("k1")
        channel = await node.ownership.own("k1", take_over=False)
        assert channel is not None
        node.link.inboxes["k1"] = [StoredEvent(1, b'{"payload":"MQ=="}', 0), StoredEvent(1, b'{"payload":"Mg=="}', 0)]
        await node.ownership.start()
        try:
            await eventually(lambda: node.link.inboxes["k1"] == [], what="the inbox drained")
        finally:
            await node.ownership.stop_tasks()
        assert len(channel.queue) == 2 and len(node.store.events["k1"]) == 2
        assert node.log == [("journaled", "k1"), ("trimmed", "k1")]

    asyncio.run(main())


def test_a_release_asked_by_another_node_hands_the_channel_over_and_drops_its_lease() -> None:
    async def main() -> None:
        node = Node()
        node.store.channels["k1"] = config("k1")
        await node.ownership.own("k1", take_over=False)
        await node.ownership.start()
        try:
            assert node.link.handler is not None
            await node.link.handler("release", "k1", OTHER)
        finally:
            await node.ownership.stop_tasks()
        assert node.registry.get("k1") is None and node.store.leases == {}

    asyncio.run(main())
