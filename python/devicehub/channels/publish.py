"""Events in: each event encoded once per distinct channel options and pushed to its channels' queues."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence

from devicehub.channels.channel import Channel
from devicehub.channels.encode import EventEncoder
from devicehub.channels.registry import ChannelRegistry
from devicehub.clock import Clock
from devicehub.domain.events import Event

# Redis mode (ownership.py): an event for these keys goes to their inboxes, wherever their channels are owned
Forward = Callable[[Iterable[str], Event], Awaitable[None]]


class Publisher:
    """Routes notifications and async-responses to keys, lifecycle events to accounts (architecture.md "Event
    routing rules"); keys without a channel store nothing."""

    def __init__(
        self,
        registry: ChannelRegistry,
        clock: Clock,
        encoder: EventEncoder,
        uid_source: Callable[[], str],
        *,
        forward: Forward | None = None,
        accounts: Callable[[str], Iterable[str]] | None = None,
    ) -> None:
        self._registry = registry
        self._clock = clock
        self._encoder = encoder
        self._uid_source = uid_source
        self._forward = forward
        self._accounts = accounts  # Redis mode: the keys of an account across the cluster

    async def publish_many(self, events: Sequence[tuple[Sequence[str], Event]]) -> None:
        """Each (keys, event) in order, with one clock reading (a loop turn's notifications)."""
        if self._forward is not None:
            for key_ids, event in events:
                await self._forward(key_ids, event)
            return
        get = self._registry.get
        now_ms = int(self._clock.now() * 1000)
        for key_ids, event in events:
            self.push([c for k in key_ids if (c := get(k)) is not None], event, now_ms)

    async def publish_account(self, account_id: str, event: Event) -> None:
        """Lifecycle events: to every channel of the account."""
        if self._forward is not None and self._accounts is not None:
            await self._forward(list(self._accounts(account_id)), event)
            return
        self.push(self._registry.of_account(account_id), event, int(self._clock.now() * 1000))

    def push(self, channels: Iterable[Channel], event: Event, now_ms: int) -> None:
        uid: str | None = None  # one identity for every channel of this event, made only if one shows it
        encoded: dict[tuple[bool, ...], bytes] = {}  # channels with equal options share one encoding
        kind = event.kind
        device = getattr(event, "device_id", "")  # issue 34 #2: per-device sequences (none for async-responses)
        for channel in channels:
            if not channel.options.carries(kind):
                continue
            options = channel.options.encoding
            data = encoded.get(options)
            if data is None:
                if uid is None and channel.options.include_uid:
                    uid = self._uid_source()
                data = encoded[options] = self._encoder.encode(event, channel.options, now_ms, uid)
            channel.push(kind, data, now_ms, device)
