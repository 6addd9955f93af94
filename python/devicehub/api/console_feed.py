"""The console's own read-only live feed (issue 32 #2): `GET /v3/console/feed`, a WebSocket whose text messages are
JSON arrays of the caller's account's events, tapped from what the domain publishes, without a notification channel:
logging in to the console with an application's key never changes that key's channel (the console used to
`PUT /v2/notification/websocket`). The key travels as on `/v2/notification/websocket-connect` (a `pelion_<key>`
sub-protocol beside `wss`, or a bearer header); a bad key closes the socket with 1008.

What a feed carries: every notification of the account's devices (whichever key subscribed), the registrations,
updates and de-registrations of its devices, the async-responses of requests made with the feed's own key, and
the removal of any of the account's notification channels by the service (issue 34 #4: `channel-removed`).
Notification values are decoded with the object model (TLV typed by the resource's type) into `values`. A slow
reader loses the oldest events beyond QUEUE_EVENTS (counted in `dropped` of the next line), never blocks the
devices. In a Redis cluster each node taps its own events and relays the account's ones, and the async-responses
for the devices it holds with the keys they are for, to the nodes serving a feed of the account
(channels/console_relay.py), only while one does: a feed sees the devices every node holds, and the answers to its
key's requests whichever node answered them (the device's holder).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from devicehub.channels.console_relay import ConsoleRelay
from devicehub.channels.removals import ChannelRemoval
from devicehub.domain.events import (
    AsyncResponseEvent,
    Event,
    NotificationEvent,
)
from devicehub.domain.ports import EventSink

QUEUE_EVENTS = 1000
MAX_FEEDS_PER_ACCOUNT = 16
HEARTBEAT_S = 15.0  # WebSocket pings: a console gone without a close is noticed
TRY_AGAIN_LATER = 1013  # RFC 6455 §7.4.1 registry: "Try Again Later"


class Tap:
    """One open feed: a bounded queue the publisher fills and the HTTP handler drains."""

    def __init__(self, account_id: str, key_id: str) -> None:
        self.account_id = account_id
        self.key_id = key_id
        self.events: deque[Event | ChannelRemoval] = deque(maxlen=QUEUE_EVENTS)
        self.dropped = 0
        self.ready = asyncio.Event()
        self.closed = False

    def put(self, event: Event | ChannelRemoval) -> None:
        if len(self.events) == QUEUE_EVENTS:
            self.dropped += 1
        self.events.append(event)
        self.ready.set()


class ConsoleFeed:
    """An EventSink around the channel hub: everything goes to the hub as before, and a copy to open taps."""

    def __init__(self, inner: EventSink) -> None:
        self._inner = inner
        self._taps: dict[str, set[Tap]] = {}  # account id → open feeds
        self.account_of: Callable[[str], str | None] = lambda device_id: None
        self.relay: ConsoleRelay | None = None  # Redis mode: the account's events of the other nodes (node.py)
        self._none: frozenset[str] = frozenset()

    async def relay_through(self, shard: Callable[[str], Any], prefix: str, node_id: str) -> None:
        """Redis mode: relay the accounts' events between nodes while a feed of theirs is open (console_relay.py)."""
        self.relay = ConsoleRelay(shard, prefix, node_id, self.relayed)
        await self.relay.start()

    async def close(self) -> None:
        """The node stops: every open feed ends."""
        for taps in self._taps.values():
            for tap in taps:
                tap.closed = True
                tap.ready.set()
        if self.relay is not None:
            await self.relay.stop()

    def full(self, account_id: str) -> bool:
        return len(self._taps.get(account_id, ())) >= MAX_FEEDS_PER_ACCOUNT

    def attach(self, account_id: str, key_id: str) -> Tap:
        taps = self._taps.setdefault(account_id, set())
        tap = Tap(account_id, key_id)
        taps.add(tap)
        if self.relay is not None:
            self.relay.hold(account_id)
        return tap

    def detach(self, tap: Tap) -> None:
        taps = self._taps.get(tap.account_id)
        if taps is not None:
            taps.discard(tap)
            if not taps:
                del self._taps[tap.account_id]
                if self.relay is not None:
                    self.relay.release(tap.account_id)

    def relayed(self, account_id: str, event: Event, keys: tuple[str, ...] = ()) -> None:
        """An event of the account from another node (Redis mode); one for `keys` only goes to their feeds."""
        for tap in self._taps.get(account_id, ()):
            if not keys or tap.key_id in keys:
                tap.put(event)

    def channel_removed(self, account_id: str, key_id: str, removal: ChannelRemoval) -> None:
        """issue 34 #4: the service removed one of the account's channels (a 410 from its receiver, 24 h of
        failures, …): every open feed of the account says so (a `channel-removed` line)."""
        for tap in self._taps.get(account_id, ()):
            tap.put(removal)

    def _tap(self, key_ids: Sequence[str], event: Event, relayed: frozenset[str]) -> None:
        if isinstance(event, NotificationEvent):
            account = self.account_of(event.device_id) or ""
            for tap in self._taps.get(account, ()):
                tap.put(event)
            if account in relayed:
                assert self.relay is not None
                self.relay.publish(account, event)
            return
        for taps in self._taps.values():
            for tap in taps:
                if tap.key_id in key_ids:
                    tap.put(event)
        if relayed and isinstance(event, AsyncResponseEvent) and event.device_id:
            device_account = self.account_of(event.device_id)  # held here: the request was answered here
            if device_account is not None and device_account in relayed:
                assert self.relay is not None
                self.relay.publish(device_account, event, tuple(key_ids))

    def _relayed(self) -> frozenset[str]:
        return self.relay.open_accounts if self.relay is not None else self._none

    async def publish(self, key_ids: Sequence[str], event: Event) -> None:
        await self._inner.publish(key_ids, event)
        relayed = self._relayed()
        if self._taps or relayed:
            self._tap(key_ids, event, relayed)

    async def publish_many(self, events: Sequence[tuple[Sequence[str], Event]]) -> None:
        await self._inner.publish_many(events)
        relayed = self._relayed()
        if self._taps or relayed:  # the hot path pays two tests when no console is open anywhere
            for key_ids, event in events:
                self._tap(key_ids, event, relayed)

    async def publish_account(self, account_id: str, event: Event) -> None:
        await self._inner.publish_account(account_id, event)
        for tap in self._taps.get(account_id, ()):
            tap.put(event)
        relay = self.relay
        if relay is not None and account_id in relay.open_accounts:
            relay.publish(account_id, event)
