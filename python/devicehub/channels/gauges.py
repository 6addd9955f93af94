"""The channels' figures for /metrics: gauges of the channels now and counters since start."""

from __future__ import annotations

from devicehub.channels.channel import CALLBACK, PULL, WEBSOCKET, Counters
from devicehub.channels.registry import ChannelRegistry


def channel_figures(
    registry: ChannelRegistry, counters: Counters, journal_pending_events: int
) -> dict[str, int | float]:
    """Read at scrape time (metrics.py exports them under these names)."""
    channels = registry.channels()
    return {
        "channels": len(channels),
        "channels_callback": sum(1 for c in channels if c.kind == CALLBACK),
        "channels_websocket": sum(1 for c in channels if c.kind == WEBSOCKET),
        "channels_pull": sum(1 for c in channels if c.kind == PULL),
        "websockets_connected": sum(1 for c in channels if c.session is not None),
        "callbacks_failing": sum(1 for c in channels if c.consecutive_failures),
        "queued_events": sum(c.size for c in channels),
        "queued_bytes": sum(c.queue.bytes_used for c in channels),
        "journal_pending_events": journal_pending_events,
        "events_queued_total": sum(counters.queued_by_kind.values()),
        "events_delivered_total": counters.events_delivered,
        "dropped_overflow_total": counters.dropped_overflow,
        "dropped_expired_total": counters.dropped_expired,
        "dropped_failed_total": counters.dropped_failed,
        "delivery_failures_total": counters.delivery_failures,
        "channels_removed_total": counters.channels_removed,
        "channels_removed_gone_total": counters.channels_removed_gone,
    }
