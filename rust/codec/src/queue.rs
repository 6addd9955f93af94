//! The per-API-key channel queue (spec §6, §8): a FIFO of pre-encoded events with a byte cap, an event
//! lifetime, and batches that are ready NotificationMessage bodies.
//!
//! Events arrive already encoded as JSON values (one object or string each), so a batch body is built by
//! concatenation, never by re-encoding. A batch that could not be delivered goes back to the head intact.

use std::collections::VecDeque;

use thiserror::Error;

/// Event kinds, in the order their arrays appear in a NotificationMessage (wire-format.md).
pub const KIND_NOTIFICATION: u8 = 0;
pub const KIND_REGISTRATION: u8 = 1;
pub const KIND_REG_UPDATE: u8 = 2;
pub const KIND_DE_REGISTRATION: u8 = 3;
pub const KIND_REGISTRATIONS_EXPIRED: u8 = 4;
pub const KIND_ASYNC_RESPONSE: u8 = 5;
/// Issue 33: firmware campaign and campaign-device changes, only for channels that opted in
/// (`cfg.include_firmware_updates`): a Pelion client never sees the array.
pub const KIND_FIRMWARE_UPDATE: u8 = 6;
const KIND_NAMES: [&str; 7] = [
    "notifications",
    "registrations",
    "reg-updates",
    "de-registrations",
    "registrations-expired",
    "async-responses",
    "firmware-updates",
];

/// What one queued event costs besides its payload: the `Event` record in the deque (kind, timestamp,
/// Vec header = 40 bytes on 64-bit) plus the heap allocator's per-allocation header and rounding (~24).
pub const EVENT_OVERHEAD_BYTES: usize = 64;
/// spec §8: 50 MB of queued events per key.
pub const DEFAULT_MAX_BYTES: usize = 50 * 1024 * 1024;
/// spec §6: events older than 24 hours are dropped.
pub const DEFAULT_LIFETIME_MS: u64 = 24 * 3600 * 1000;
/// wire-format.md: `max_chunk_size` default and maximum.
pub const DEFAULT_CHUNK_SIZE: usize = 10_000;
pub const MAX_CHUNK_SIZE: usize = 20_000;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum QueueError {
    #[error("unknown event kind {0}")]
    Kind(u8),
    #[error("batch size must be 1-{MAX_CHUNK_SIZE}, got {0}")]
    BatchSize(usize),
    #[error("an event of {size} bytes can never fit the {max} byte cap")]
    TooLarge { size: usize, max: usize },
    #[error("max_bytes must be positive")]
    ZeroCap,
    #[error("lifetime_ms must be positive")]
    ZeroLifetime,
}

/// Why the queue let go of an undelivered event (issue 34 #5: a dead letter's cause).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// spec §8: the key's byte cap was exceeded; the oldest went.
    ByteCap,
    /// spec §6: the event outlived the lifetime.
    Lifetime,
}

impl DropCause {
    pub fn name(self) -> &'static str {
        match self {
            DropCause::ByteCap => "byte_cap",
            DropCause::Lifetime => "lifetime",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: u8,
    pub data: Vec<u8>,
    pub queued_at_ms: u64,
}

impl Event {
    fn cost(&self) -> usize {
        self.data.len() + EVENT_OVERHEAD_BYTES
    }
}

/// Events taken from a queue, with their NotificationMessage body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub events: Vec<Event>,
    pub body: Vec<u8>,
}

impl Batch {
    /// How long the events waited until `now_ms`, counted into `counts` (one slot per upper bound in
    /// `bounds_ms`, ascending, and a last slot for longer waits); returns the waits' sum in ms. One call per
    /// delivered batch keeps the delivery-latency histogram off the per-event path.
    pub fn count_waits(&self, now_ms: u64, bounds_ms: &[u64], counts: &mut [u64]) -> u64 {
        debug_assert_eq!(counts.len(), bounds_ms.len() + 1);
        let mut sum = 0u64;
        for event in &self.events {
            let waited = now_ms.saturating_sub(event.queued_at_ms);
            sum = sum.saturating_add(waited);
            let slot = bounds_ms.partition_point(|&bound| bound < waited);
            counts[slot] += 1;
        }
        sum
    }
}

#[derive(Debug)]
pub struct ChannelQueue {
    events: VecDeque<Event>,
    bytes_used: usize,
    max_bytes: usize,
    lifetime_ms: u64,
    pub dropped_overflow: u64,
    pub dropped_expired: u64,
    pub pushed_total: u64,
    /// Events the cap or the lifetime removed, kept (moved, not copied) until `take_dropped` hands them to the
    /// dead-letter list; bounded by the byte cap (the oldest go first), so a caller that never asks costs at
    /// most one more cap.
    dropped: VecDeque<(Event, DropCause)>,
    dropped_bytes: usize,
}

impl ChannelQueue {
    pub fn new(max_bytes: usize, lifetime_ms: u64) -> Result<Self, QueueError> {
        if max_bytes == 0 {
            return Err(QueueError::ZeroCap);
        }
        if lifetime_ms == 0 {
            return Err(QueueError::ZeroLifetime);
        }
        Ok(Self {
            events: VecDeque::new(),
            bytes_used: 0,
            max_bytes,
            lifetime_ms,
            dropped_overflow: 0,
            dropped_expired: 0,
            pushed_total: 0,
            dropped: VecDeque::new(),
            dropped_bytes: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn bytes_used(&self) -> usize {
        self.bytes_used
    }

    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    pub fn lifetime_ms(&self) -> u64 {
        self.lifetime_ms
    }

    /// Append one event; returns how many oldest events were dropped to stay under the cap.
    pub fn push(&mut self, kind: u8, data: Vec<u8>, now_ms: u64) -> Result<usize, QueueError> {
        if usize::from(kind) >= KIND_NAMES.len() {
            return Err(QueueError::Kind(kind));
        }
        let event = Event {
            kind,
            data,
            queued_at_ms: now_ms,
        };
        if event.cost() > self.max_bytes {
            return Err(QueueError::TooLarge {
                size: event.cost(),
                max: self.max_bytes,
            });
        }
        self.bytes_used += event.cost();
        self.events.push_back(event);
        self.pushed_total += 1;
        Ok(self.enforce_cap())
    }

    fn enforce_cap(&mut self) -> usize {
        let mut dropped = 0;
        while self.bytes_used > self.max_bytes {
            let Some(oldest) = self.events.pop_front() else {
                break;
            };
            self.bytes_used -= oldest.cost();
            self.keep_dropped(oldest, DropCause::ByteCap);
            dropped += 1;
        }
        self.dropped_overflow += dropped as u64;
        dropped
    }

    fn keep_dropped(&mut self, event: Event, cause: DropCause) {
        self.dropped_bytes += event.cost();
        self.dropped.push_back((event, cause));
        while self.dropped_bytes > self.max_bytes {
            let Some((oldest, _)) = self.dropped.pop_front() else {
                break;
            };
            self.dropped_bytes -= oldest.cost();
        }
    }

    /// The events the cap or the lifetime removed since the last call, in the order they left (the queue's
    /// order), with why; at most a byte cap's worth (the oldest of them go first).
    pub fn take_dropped(&mut self) -> Vec<(Event, DropCause)> {
        self.dropped_bytes = 0;
        self.dropped.drain(..).collect()
    }

    /// Remove events whose age reached the lifetime; returns how many.
    ///
    /// Only the head is examined: events are pushed in clock order and put back in their original
    /// place, so the head is the oldest. After a wall-clock step backwards an older event can sit
    /// behind a newer one and is dropped a little late, never early.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let mut removed = 0;
        while let Some(head) = self.events.front() {
            if now_ms.saturating_sub(head.queued_at_ms) < self.lifetime_ms {
                break;
            }
            let head = self.events.pop_front().expect("front exists");
            self.bytes_used -= head.cost();
            self.keep_dropped(head, DropCause::Lifetime);
            removed += 1;
        }
        self.dropped_expired += removed as u64;
        removed
    }

    /// Expire, then take up to `max_items` events from the head as one batch (None when empty).
    pub fn take_batch(
        &mut self,
        max_items: usize,
        now_ms: u64,
    ) -> Result<Option<Batch>, QueueError> {
        self.take_batch_bounded(max_items, usize::MAX, now_ms)
    }

    /// As `take_batch`, and the events' bytes stay within `max_body_bytes` (a receiver's frame or body
    /// limit), except that the head event always goes, alone if it is larger on its own.
    pub fn take_batch_bounded(
        &mut self,
        max_items: usize,
        max_body_bytes: usize,
        now_ms: u64,
    ) -> Result<Option<Batch>, QueueError> {
        if !(1..=MAX_CHUNK_SIZE).contains(&max_items) {
            return Err(QueueError::BatchSize(max_items));
        }
        self.expire(now_ms);
        if self.events.is_empty() {
            return Ok(None);
        }
        // an upper bound (by 2 bytes at most) of what `notification_message` produces: braces, per kind `"name":[` + `]`
        // and a comma between arrays, each event and a comma between events
        let mut count = 0;
        let mut body_bytes = 2usize;
        let mut kinds_seen = [false; KIND_NAMES.len()];
        for event in self.events.iter().take(max_items) {
            let kind = usize::from(event.kind);
            let mut cost = event.data.len() + 1;
            if !kinds_seen[kind] {
                cost += KIND_NAMES[kind].len() + 6;
            }
            if count > 0 && body_bytes.saturating_add(cost) > max_body_bytes {
                break;
            }
            kinds_seen[kind] = true;
            body_bytes = body_bytes.saturating_add(cost);
            count += 1;
        }
        let events: Vec<Event> = self.events.drain(..count).collect();
        self.bytes_used -= events.iter().map(Event::cost).sum::<usize>();
        let body = notification_message(&events);
        Ok(Some(Batch { events, body }))
    }

    /// Return an undelivered batch to the head in its order; returns events the cap then dropped.
    pub fn put_back(&mut self, batch: Batch) -> usize {
        for event in batch.events.into_iter().rev() {
            self.bytes_used += event.cost();
            self.events.push_front(event);
        }
        self.enforce_cap()
    }

    /// Remove every event; returns how many.
    pub fn clear(&mut self) -> usize {
        let count = self.events.len();
        self.events.clear();
        self.bytes_used = 0;
        count
    }

    pub fn iter(&self) -> impl Iterator<Item = &Event> {
        self.events.iter()
    }
}

/// `{"notifications":[…],"registrations":[…],…}` with only the kinds present, events in queue order.
pub fn notification_message(events: &[Event]) -> Vec<u8> {
    let size: usize = events.iter().map(|e| e.data.len() + 1).sum::<usize>() + 128;
    let mut body = Vec::with_capacity(size);
    body.push(b'{');
    let mut first_array = true;
    for (kind, name) in KIND_NAMES.iter().enumerate() {
        let mut first_item = true;
        for event in events.iter().filter(|e| usize::from(e.kind) == kind) {
            if first_item {
                if !first_array {
                    body.push(b',');
                }
                body.push(b'"');
                body.extend_from_slice(name.as_bytes());
                body.extend_from_slice(b"\":[");
                first_array = false;
                first_item = false;
            } else {
                body.push(b',');
            }
            body.extend_from_slice(&event.data);
        }
        if !first_item {
            body.push(b']');
        }
    }
    body.push(b'}');
    body
}

#[cfg(test)]
mod tests;
