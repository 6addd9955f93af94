"""The channels this node owns, by API key and by account (spec §2.5: one channel per key)."""

from __future__ import annotations

from collections.abc import Iterator

from devicehub.channels.channel import Channel


class ChannelRegistry:
    """Look-ups only: who creates, replaces and removes a channel, and under which lock, is lifecycle.py's."""

    def __init__(self) -> None:
        self._channels: dict[str, Channel] = {}
        self._by_account: dict[str, set[str]] = {}

    def get(self, key_id: str) -> Channel | None:
        return self._channels.get(key_id)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._channels

    def __len__(self) -> int:
        return len(self._channels)

    def __iter__(self) -> Iterator[Channel]:
        return iter(self._channels.values())

    def keys(self) -> list[str]:
        """A copy: callers await between keys while channels come and go."""
        return list(self._channels)

    def channels(self) -> list[Channel]:
        """A copy, for the same reason."""
        return list(self._channels.values())

    def of_account(self, account_id: str) -> Iterator[Channel]:
        """The account's channels (lifecycle events go to every one of them)."""
        channels = self._channels
        return (channels[k] for k in self._by_account.get(account_id, ()))

    def add(self, channel: Channel) -> None:
        self._channels[channel.key_id] = channel
        self._by_account.setdefault(channel.config.account_id, set()).add(channel.key_id)

    def discard(self, channel: Channel) -> None:
        """Forget the channel (a no-op when another one holds its key by now)."""
        if self._channels.get(channel.key_id) is not channel:
            return
        del self._channels[channel.key_id]
        keys = self._by_account.get(channel.config.account_id)
        if keys is not None:
            keys.discard(channel.key_id)
            if not keys:
                del self._by_account[channel.config.account_id]

    def largest_queues(self, count: int) -> list[Channel]:
        """The `count` channels holding the most queued bytes, largest first."""
        return sorted(self._channels.values(), key=lambda c: c.queue.bytes_used, reverse=True)[:count]
