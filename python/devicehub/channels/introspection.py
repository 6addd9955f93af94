"""issue 34 #5: a channel as an operator sees it (`GET /v2/notification/channel?include=status`, `devicehub
channels`): its state, queue, oldest event, delivery rate, last error and drops by cause. Read on an operator's call,
never on the event path."""

from __future__ import annotations

import msgspec

from devicehub.channels.channel import PULL, WEBSOCKET, Channel


class ChannelDropCounts(msgspec.Struct, frozen=True, kw_only=True):
    byte_cap: int
    lifetime: int
    failed: int  # free tier: a batch whose one attempt failed


class ChannelState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What an operator needs to see why a queue grows."""

    kind: str
    state: str  # connected | disconnected | polling | idle | delivering | retrying | breaker-open
    queue_size: int
    queue_bytes: int
    oldest_age_s: float | None = None
    delivery_rate: float  # events a second delivered over the last full minute
    delivered: int  # events delivered by this node since it took the channel
    last_error: str | None = None
    next_retry_at: str | None = None
    consecutive_failures: int
    drops: ChannelDropCounts
    cursor: int | None = None  # the last cursor given (cursor channels)
    retained: int | None = None  # events retained for a resume (cursor channels)


def channel_state(channel: Channel, now: float) -> ChannelState:
    oldest = channel.oldest_ms()
    status = channel.status()
    cursors = channel.cursors
    return ChannelState(
        kind=channel.kind,
        state=_state_name(channel),
        queue_size=status.queue_size,
        queue_bytes=status.queue_bytes,
        oldest_age_s=round(now - oldest / 1000, 3) if oldest is not None else None,
        delivery_rate=round(channel.delivery_rate(now), 3),
        delivered=channel.delivered_total,
        last_error=channel.last_error,
        next_retry_at=status.next_retry_at,
        consecutive_failures=channel.consecutive_failures,
        drops=ChannelDropCounts(
            byte_cap=status.dropped_overflow, lifetime=status.dropped_expired, failed=status.dropped_failed
        ),
        cursor=cursors.last if cursors is not None else None,
        retained=len(cursors.events) if cursors is not None else None,
    )


def _state_name(channel: Channel) -> str:
    if channel.kind == WEBSOCKET:
        return "connected" if channel.session is not None else "disconnected"
    if channel.kind == PULL:
        return "polling" if channel.polling else "idle"
    if channel.breaker_open:
        return "breaker-open"
    if channel.retry_at is not None and channel.consecutive_failures:
        return "retrying"
    return "delivering" if channel.in_flight else "idle"
