"""One API key's channel at run time: its config, its Rust queue, the journal mirror of it and delivery state."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from devicehub._core import DEFAULT_MAX_BYTES, Batch, ChannelQueue
from devicehub.channels import deadletters
from devicehub.channels.cursors import CursorLog
from devicehub.channels.delivery import DeliveryOptions, RateLimit
from devicehub.channels.journal import Journal
from devicehub.channels.options import ChannelOptions
from devicehub.domain.model import ChannelConfig, ChannelDrops, StoredEvent
from devicehub.domain.timefmt import rfc3339
from devicehub.errors import BadRequest, ValidationFailed

_BATCH_FIELDS_BYTES = 64  # `,"cursor":N,"lost":K` a cursor channel adds to a batch body

CALLBACK = "callback"
WEBSOCKET = "websocket"
PULL = "pull"


class Session(Protocol):
    """An open socket bound to a channel, as the hub and the sweeper see it (websocket.py's WebSocketSession)."""

    @property
    def last_activity(self) -> float:
        """Clock seconds of the last frame either way (spec §8: 24 h inactive → closed)."""

    async def close(self, code: int, reason: str) -> None:
        """Close from the server side and return once the session is over (its batch that was out is back)."""


class Outbox(Protocol):
    """What a socket session takes its frames from: `Channel` is one (the session is a transport of a channel and
    depends on this, never the reverse)."""

    @property
    def key_id(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def take(self, now_ms: int) -> Batch | None: ...

    def give_back(self, batch: Batch) -> None: ...

    def pace(self, count: int, now: float) -> float: ...

    def body(self, batch: Batch) -> bytes: ...

    def delivered(self, batch: Batch, now: float) -> None: ...

    async def wait_for_events(self) -> None: ...


@dataclass(slots=True)
class Counters:
    """Hub-wide event and channel counters since start (exported by `ChannelHub.metrics`)."""

    events_delivered: int = 0
    dropped_overflow: int = 0
    dropped_expired: int = 0
    dropped_failed: int = 0  # free tier: a batch whose one attempt failed (spec §8)
    delivery_failures: int = 0
    channels_removed: int = 0
    channels_removed_gone: int = 0  # issue 34 #4: a callback receiver answered 410 (remove_on_gone)
    # observer of each delivered batch, when it went (seconds) and the channel's kind: one call per batch
    on_delivered: Callable[[Batch, float, str], None] | None = None
    queued_by_kind: dict[int, int] = field(default_factory=dict)  # event kind → events queued (/metrics)


class ChannelStatus(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the channel GETs show besides the config."""

    queue_size: int
    queue_bytes: int
    dropped_overflow: int
    dropped_expired: int
    dropped_failed: int
    consecutive_failures: int
    last_delivery_at: str | None = None
    next_retry_at: str | None = None


def _delivery(config: ChannelConfig) -> DeliveryOptions:
    try:
        return DeliveryOptions.from_wire(config.delivery or None)
    except ValidationFailed:
        return DeliveryOptions()


RATE_WINDOW_S = 60.0


class Channel:
    """Queue and delivery state of one key; at most one batch is out for delivery at a time."""

    def __init__(
        self,
        config: ChannelConfig,
        journal: Journal,
        counters: Counters,
        now: float,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_batch_bytes: int | None = None,
    ) -> None:
        self.config = config
        self.max_batch_bytes = max_batch_bytes  # a receiver's frame/body limit (None: events alone bound it)
        self.options = ChannelOptions.from_stored(config.serialization)
        self.delivery = _delivery(config)
        self.rate = RateLimit(self.delivery.max_rate, now) if self.delivery.max_rate else None
        self._kinds = self.delivery.kinds
        self.breaker_open = False  # issue 34 #4: the circuit breaker stopped attempts; the next one probes
        self.removed_gone = False  # the receiver answered 410 and the channel went (issue 34 #4)
        self.last_error: str | None = None  # what the last failed attempt got
        self.queue = ChannelQueue(max_bytes)  # spec §8: 50 MB per key, oldest dropped beyond
        self.closed = False
        self.last_data_at = now  # spec §8: 48 h without incoming data removes the channel
        self.last_delivery_at: float | None = None
        self.consecutive_failures = 0
        self.failing_since: float | None = None  # first failure of the current run (spec §6: 24 h → closed)
        self.retry_at: float | None = None
        self.dropped_failed = 0
        self.lost_before = ChannelDrops()  # what the channel lost before this process (from the store)
        # transports: a callback deliverer task, a bound WebSocket, or pull bookkeeping
        self.deliverer: asyncio.Task[None] | None = None
        self.session: Session | None = None
        self.sockets_opened = 0  # sockets that came for it: the newest one is kept (spec §7)
        self.disconnected_since: float | None = None  # when its socket closed (spec §3.3: 24 h to reconnect)
        self.last_polled_at = now
        self.polling = False
        self.poll_idle = asyncio.Event()
        self.poll_idle.set()
        self.stopping = False  # the transport is being replaced or removed: waiters give up
        self._journal = journal
        self._counters = counters
        self._in_flight: Batch | None = None
        self._in_flight_first = 0  # ordinal (events pushed into `queue` before it) of the batch's first event
        self._nonce = uuid.uuid4().hex[:16]  # this queue's webhook-id prefix: ids are unique across restarts
        self._behind = 0  # events that left from behind the batch that is out (see journal.py)
        self._seen_overflow = 0
        self._seen_expired = 0
        self._wake = asyncio.Event()
        # issue 34 #1, #2: cursors (cursors.py) when the options ask for them; a change of that option waits for a
        # moment with no batch out, when the journal is exactly the queue or exactly the retained events
        self.cursors: CursorLog | None = None
        self._cursor_mode_wanted = self.options.include_cursor
        self._left_queue = 0  # events that left the queue since the channel began (a cursor channel's queue head)
        self._uncounted_deliveries = 0  # deliveries not in the store's count (a channel without cursors)
        self.dead_letters = deadletters.DeadLetters()  # what the cap or the lifetime took (issue 34 #5)
        self.pending_lost = 0  # events a resume asked for that were no longer retained: said in the next batch
        self._body: bytes | None = None  # the batch that is out, as sent (a cursor channel adds to Rust's body)
        self.delivered_total = 0
        self._window = (now, 0, 0.0)  # (start, events delivered in it, the previous full window's rate)
        if self._cursor_mode_wanted:
            self.cursors = CursorLog(self.options.retention_s * 1000, max_bytes)

    @property
    def key_id(self) -> str:
        return self.config.key_id

    @property
    def kind(self) -> str:
        return self.config.kind

    def reconfigure(self, config: ChannelConfig) -> None:
        """A new config for the same key: the queue stays, new events use the new options."""
        self.config = config
        self.options = ChannelOptions.from_stored(config.serialization)
        self.delivery = _delivery(config)
        self.rate = RateLimit(self.delivery.max_rate, self.last_data_at) if self.delivery.max_rate else None
        self._kinds = self.delivery.kinds
        self.breaker_open = False
        self.stopping = False
        self.consecutive_failures = 0
        self.failing_since = None
        self.retry_at = None
        self._cursor_mode_wanted = self.options.include_cursor
        if self.cursors is not None:
            self.cursors.retention_ms = self.options.retention_s * 1000
        if self._in_flight is None:
            self._switch_cursor_mode()

    # ---- queue operations ----------------------------------------------------------------------
    def push(self, kind: int, data: bytes, now_ms: int, device: str = "", origin: str = "") -> None:
        """Queue one encoded event; `device` is the device it came from ("" when none: async-responses), `origin`
        its id from the forwarding node (Redis mode, cursor channels)."""
        if self._kinds is not None and kind not in self._kinds:
            return  # issue 34 #4: the channel's event-type filter
        if self.cursors is not None:
            if origin and not self.cursors.first_time(origin):
                return  # drained again after an owner died between journaling it and trimming the inbox
            data = self.cursors.stamp(data, device)
            self._queue_stamped(StoredEvent(kind, data, now_ms, device, origin), now_ms)
            return
        # the per-event path of every other channel, as it was before cursors (fleet load: issue 15)
        dropped = self.queue.push(kind, data, now_ms)
        self._journal.append(self.config.key_id, StoredEvent(kind, data, now_ms))
        queued = self._counters.queued_by_kind
        queued[kind] = queued.get(kind, 0) + 1
        self.last_data_at = now_ms / 1000
        if dropped:
            self._account()
        self._wake.set()

    def _queue_stamped(self, event: StoredEvent, now_ms: int) -> None:
        kind = event.kind
        dropped = self.queue.push(kind, event.data, now_ms)
        self._journal.append(self.config.key_id, event)
        if self.cursors is not None:
            self.cursors.keep(event)
            self._evict(now_ms)
        queued = self._counters.queued_by_kind
        queued[kind] = queued.get(kind, 0) + 1
        self.last_data_at = now_ms / 1000
        if dropped:  # a push changes only the cap's count, by what it returns (every other change accounts itself)
            self._account()
        self._wake.set()

    def restore(self, events: list[StoredEvent], lost_before: ChannelDrops) -> None:
        """Refill the queue from the journal at start; only what the cap or the lifetime drops is journaled."""
        self.lost_before = lost_before
        self._left_queue = lost_before.left_queue
        if self.cursors is not None:
            events = self.cursors.restore(events, lost_before.left_queue)
        elif lost_before.delivered and events:
            # the journal was a cursor channel's (its options changed while another node or no process held it):
            # it retains delivered events too, which must not come back; from now on it is the queue again
            retained = len(events)
            events = CursorLog(0, self.queue.max_bytes).restore(events, lost_before.left_queue)
            if len(events) != retained:
                self._journal.rewrite(self.key_id, events)
        for event in events:
            self.queue.push(event.kind, event.data, event.queued_at_ms)
        self._account()

    def take(self, now_ms: int) -> Batch | None:
        """The next batch (up to max_chunk_size events, spec §6 rule 1, and max_batch_bytes), or None when empty."""
        if self._in_flight is not None:
            raise RuntimeError(f"channel {self.key_id} already has a batch out")
        self._switch_cursor_mode()
        limit = self.max_batch_bytes
        if self.cursors is not None and limit is not None:
            limit = max(limit - _BATCH_FIELDS_BYTES, 1)  # room for the batch's own "cursor" and "lost"
        batch = self.queue.take_batch(self.options.max_chunk_size, now_ms, limit)
        self._account()
        self._in_flight = batch
        self._body = None
        if batch is not None:  # only the head leaves a queue, so what was pushed minus what is left locates it
            self._in_flight_first = self.queue.pushed_total - len(self.queue) - batch.count
            if self.cursors is not None:
                last = self.cursors.last - len(self.queue)
                self._in_flight_first = last - batch.count + 1
                extra = b',"cursor":%d' % last
                if self.pending_lost:
                    extra += b',"lost":%d' % self.pending_lost
                self._body = batch.body[:-1] + extra + b"}"
        return batch

    def pace(self, count: int, now: float) -> float:
        """issue 34 #4: seconds a batch of `count` events waits for the channel's `max_rate` (0 without one)."""
        return self.rate.wait(count, now) if self.rate is not None else 0.0

    def body(self, batch: Batch) -> bytes:
        """What to send for the batch that is out: Rust's NotificationMessage, with a cursor channel's top-level
        `"cursor"` (its last event's) and, after a resume that came too late, `"lost"`."""
        return self._body if self._body is not None and batch is self._in_flight else batch.body

    def message_id(self, batch: Batch) -> str:
        """The Standard Webhooks `webhook-id` of the batch that is out: the same for each retry of the same events
        (a receiver deduplicates on it), different for any other batch."""
        return f"msg_{self._nonce}_{self._in_flight_first}_{batch.count}"

    def delivered(self, batch: Batch, now: float) -> None:
        self._settle(batch, delivered=True)
        self.pending_lost = 0
        self._evict(int(now * 1000))
        self._counters.events_delivered += batch.count
        self.delivered_total += batch.count
        start, count, rate = self._window
        if now - start >= RATE_WINDOW_S:  # a window ended: its rate (or 0 if more than one passed) is shown
            rate = count / RATE_WINDOW_S if now - start < 2 * RATE_WINDOW_S else 0.0
            start, count = now, 0
        self._window = (start, count + batch.count, rate)
        if self._counters.on_delivered is not None:
            self._counters.on_delivered(batch, now, self.kind)
        self.last_delivery_at = now
        self.consecutive_failures = 0
        self.failing_since = None
        self.retry_at = None

    def discard(self, batch: Batch) -> None:
        """Free tier (spec §8): the batch's one attempt failed; it is dropped and the next batch goes."""
        self._settle(batch, delivered=False)
        self.dropped_failed += batch.count
        self._counters.dropped_failed += batch.count
        if not self.closed:
            self._journal.count_lost(self.key_id, ChannelDrops(failed=batch.count))

    def give_back(self, batch: Batch) -> None:
        """Delivery did not happen: the batch returns to the head, order kept (spec §6 rule 4)."""
        if self._in_flight is not batch:
            return
        self._in_flight = None
        self._body = None
        self.queue.put_back(batch)
        if self._behind and not self.closed and self.cursors is None:
            self._behind = 0
            self._account(journal=False)
            events = [StoredEvent(kind, data, at) for kind, data, at in self.queue.snapshot()]
            self._journal.rewrite(self.key_id, events)
        else:
            self._account()
        if len(self.queue):
            self._wake.set()

    def failed(self, now: float, error: str = "") -> None:
        """A delivery attempt failed (the batch is given back or discarded separately)."""
        self.last_error = error or None
        self.consecutive_failures += 1
        self._counters.delivery_failures += 1
        if self.failing_since is None:
            self.failing_since = now

    def expire(self, now_ms: int) -> None:
        self.queue.expire(now_ms)
        self._account()
        self._evict(now_ms)

    def redrive_dead_letters(self, now_ms: int) -> int:
        """issue 34 #5: queue the dead letters again as new events (deadletters.py); returns how many."""
        letters = self.dead_letters.take_all()
        for letter in letters:
            if self.cursors is not None:
                data = self.cursors.restamp(letter.data)
                self._queue_stamped(StoredEvent(letter.kind, data, now_ms), now_ms)
            else:
                self.push(letter.kind, letter.data, now_ms)
        return len(letters)

    def rewind(self, after: int, now_ms: int) -> int:
        """issue 34 #1: queue again every retained event after cursor `after` (a resume); the queue's other
        events are among them. Returns how many after it are no longer retained (said as `"lost"` in the next
        batch). The caller has stopped the transport: no batch is out."""
        cursors = self.cursors
        if cursors is None:
            raise BadRequest(
                "the channel's events carry no cursor: set serialization.cfg.include_cursor first",
                token="CURSORS_NOT_ENABLED",
            )
        if self._in_flight is not None:
            raise RuntimeError(f"channel {self.key_id} has a batch out")
        after = max(0, min(after, cursors.last))
        events, lost = cursors.after(after)
        self.queue.clear()
        for event in events:
            self.queue.push(event.kind, event.data, event.queued_at_ms)
        self._account()
        moved = cursors.last - len(self.queue) - self._left_queue  # the queue's head is cursor left_queue + 1
        if moved and not self.closed:  # the store's count of what left the queue follows
            self._left_queue += moved
            self._journal.count_lost(self.key_id, ChannelDrops(delivered=moved))
        self.pending_lost = lost
        if len(self.queue):
            self._wake.set()
        return lost

    def close(self) -> None:
        """The channel is removed: nothing is journaled any more and waiters wake up."""
        self.closed = True
        self.queue.clear()
        self._wake.set()

    def interrupt(self) -> None:
        """Wake whoever waits for events: its transport is going away."""
        self.stopping = True
        self._wake.set()

    async def wait_for_events(self) -> None:
        while not len(self.queue) and not self.closed and not self.stopping:
            self._wake.clear()
            await self._wake.wait()

    @property
    def size(self) -> int:
        """Events not yet delivered, the batch that is out included."""
        return len(self.queue) + (self._in_flight.count if self._in_flight is not None else 0)

    def status(self) -> ChannelStatus:
        return ChannelStatus(
            queue_size=self.size,
            queue_bytes=self.queue.bytes_used,
            dropped_overflow=self.lost_before.overflow + self.queue.dropped_overflow,
            dropped_expired=self.lost_before.expired + self.queue.dropped_expired,
            dropped_failed=self.lost_before.failed + self.dropped_failed,
            consecutive_failures=self.consecutive_failures,
            last_delivery_at=rfc3339(self.last_delivery_at) if self.last_delivery_at is not None else None,
            next_retry_at=rfc3339(self.retry_at) if self.retry_at is not None else None,
        )

    def oldest_ms(self) -> int | None:
        """When the oldest undelivered event was queued (the batch out included). Copies the queue's events
        (snapshot): an operator's call, not a per-event one."""
        head = self.queue.snapshot()[:1] if len(self.queue) else []
        in_flight = self._in_flight.events()[:1] if self._in_flight is not None else []
        oldest = (in_flight or head)[0] if in_flight or head else None
        return None if oldest is None else int(oldest[2])

    def delivery_rate(self, now: float) -> float:
        """Events a second delivered over the last full minute (0 when none were for two)."""
        start, _, rate = self._window
        return 0.0 if now - start >= 2 * RATE_WINDOW_S else rate

    @property
    def in_flight(self) -> bool:
        return self._in_flight is not None

    # ---- journal mirror --------------------------------------------------------------------------
    def _settle(self, batch: Batch, *, delivered: bool) -> None:
        """The batch that was out leaves for good: it and whatever left behind it come off the journal's head
        (a cursor channel's journal keeps them: it mirrors the retained events, and counts the delivery)."""
        self._in_flight = None
        self._body = None
        self._left_queue += batch.count
        if self.cursors is not None:
            if delivered and not self.closed:
                self._journal.count_lost(self.key_id, ChannelDrops(delivered=batch.count))
        else:
            if delivered:
                self._uncounted_deliveries += batch.count
            if not self.closed:
                self._journal.drop(self.key_id, batch.count + self._behind)
        self._behind = 0

    def _evict(self, now_ms: int) -> None:
        """A cursor channel lets go of retained events past retention (or the cap) that have left the queue."""
        cursors = self.cursors
        if cursors is None:
            return
        in_flight = self._in_flight.count if self._in_flight is not None else 0
        gone = cursors.evict(cursors.last - len(self.queue) - in_flight + 1, now_ms, self.queue.bytes_used)
        if gone and not self.closed:
            self._journal.drop(self.key_id, gone)

    def _switch_cursor_mode(self) -> None:
        """Apply a change of include_cursor while no batch is out (the journal then mirrors exactly the queue, or
        exactly the retained events)."""
        if self._cursor_mode_wanted == (self.cursors is not None) or self._in_flight is not None or self.closed:
            return
        events = [StoredEvent(kind, data, at) for kind, data, at in self.queue.snapshot()]
        if self._cursor_mode_wanted:  # the journal holds the queue: those events become the first retained ones
            cursors = CursorLog(self.options.retention_s * 1000, self.queue.max_bytes)
            cursors.assign(events, self._left_queue)
            self.cursors = cursors
            if self._uncounted_deliveries:  # the store's count of what left the queue catches up
                self._journal.count_lost(self.key_id, ChannelDrops(delivered=self._uncounted_deliveries))
                self._uncounted_deliveries = 0
        else:  # the journal holds the retained events: it becomes the queue again
            self.cursors = None
            self._journal.rewrite(self.key_id, events)

    def _account(self, *, journal: bool = True) -> None:
        """Count what the cap and the lifetime dropped since the last look (all of it left from the head)."""
        overflow = self.queue.dropped_overflow - self._seen_overflow
        expired = self.queue.dropped_expired - self._seen_expired
        if not overflow and not expired:
            return
        self.dead_letters.collect(self.queue)  # issue 34 #5: what they took, on every channel kind
        self._seen_overflow += overflow
        self._seen_expired += expired
        self._counters.dropped_overflow += overflow
        self._counters.dropped_expired += expired
        if self.closed:
            return
        self._journal.count_lost(self.key_id, ChannelDrops(overflow=overflow, expired=expired))
        self._left_queue += overflow + expired
        if not journal or self.cursors is not None:  # a cursor channel's journal keeps them while retained
            return
        if self._in_flight is not None:
            self._behind += overflow + expired  # they were queued behind the batch that is out
        else:
            self._journal.drop(self.key_id, overflow + expired)
