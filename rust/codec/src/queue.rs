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
const KIND_NAMES: [&str; 6] = [
    "notifications",
    "registrations",
    "reg-updates",
    "de-registrations",
    "registrations-expired",
    "async-responses",
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
            dropped += 1;
        }
        self.dropped_overflow += dropped as u64;
        dropped
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn note(n: usize) -> Vec<u8> {
        format!("{{\"n\":{n}}}").into_bytes()
    }

    proptest! {
        #[test]
        fn bounded_batch_body_never_exceeds_the_bound_unless_one_event(
            sizes in proptest::collection::vec((0u8..6, 0usize..300), 1..40),
            bound in 1usize..2_000,
        ) {
            let mut queue = ChannelQueue::new(DEFAULT_MAX_BYTES, DEFAULT_LIFETIME_MS).unwrap();
            for (kind, size) in &sizes {
                queue.push(*kind, vec![b'1'; *size], 0).unwrap();
            }
            while let Some(batch) = queue.take_batch_bounded(MAX_CHUNK_SIZE, bound, 0).unwrap() {
                prop_assert!(batch.events.len() == 1 || batch.body.len() <= bound);
            }
        }
    }

    #[test]
    fn waits_are_counted_into_their_bucket_with_their_sum() {
        let mut queue = ChannelQueue::new(DEFAULT_MAX_BYTES, DEFAULT_LIFETIME_MS).unwrap();
        for queued_at in [1_000, 1_990, 1_995, 2_000] {
            queue.push(KIND_NOTIFICATION, note(1), queued_at).unwrap();
        }
        let batch = queue.take_batch(10, 2_000).unwrap().unwrap();
        let mut counts = [0u64; 3];
        // waits 1000, 10, 5, 0 ms against bounds 5 ms and 100 ms (a bound is inclusive, as Prometheus `le`)
        let sum = batch.count_waits(2_000, &[5, 100], &mut counts);
        assert_eq!(counts, [2, 1, 1]);
        assert_eq!(sum, 1_015);
    }

    #[test]
    fn bounded_batch_stops_before_the_byte_limit_but_always_takes_the_head() {
        let mut queue = ChannelQueue::new(DEFAULT_MAX_BYTES, DEFAULT_LIFETIME_MS).unwrap();
        for n in 0..10 {
            queue
                .push(KIND_NOTIFICATION, vec![b'x'; 100 + n], 0)
                .unwrap();
        }
        // {"notifications":[a,b]} with a, b of 100 and 101 bytes is 222 bytes; a third event would not fit
        let batch = queue.take_batch_bounded(10, 250, 0).unwrap().unwrap();
        assert_eq!(batch.events.len(), 2);
        assert_eq!(batch.body.len(), 222);
        // a head larger than the bound goes alone rather than blocking the queue forever
        let batch = queue.take_batch_bounded(10, 10, 0).unwrap().unwrap();
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.events[0].data.len(), 102);
        assert_eq!(queue.len(), 7);
    }

    #[test]
    fn cap_overflow_drops_oldest_with_exact_byte_counts() {
        let cost = 7 + EVENT_OVERHEAD_BYTES; // {"n":1} is 7 bytes
        let mut queue = ChannelQueue::new(3 * cost, DEFAULT_LIFETIME_MS).unwrap();
        for n in 1..=3 {
            assert_eq!(queue.push(KIND_NOTIFICATION, note(n), 0).unwrap(), 0);
        }
        assert_eq!(queue.bytes_used(), 3 * cost);
        assert_eq!(queue.push(KIND_NOTIFICATION, note(4), 0).unwrap(), 1);
        assert_eq!(queue.bytes_used(), 3 * cost);
        assert_eq!(queue.dropped_overflow, 1);
        let kept: Vec<_> = queue.iter().map(|e| e.data.clone()).collect();
        assert_eq!(kept, vec![note(2), note(3), note(4)]);
        // one bigger event pushes out two
        let big = vec![b'1'; cost + 7];
        assert_eq!(queue.push(KIND_NOTIFICATION, big.clone(), 0).unwrap(), 2);
        assert_eq!(queue.bytes_used(), cost + big.len() + EVENT_OVERHEAD_BYTES);
        assert_eq!(queue.dropped_overflow, 3);
    }

    #[test]
    fn an_event_larger_than_the_cap_is_rejected_and_nothing_changes() {
        let mut queue = ChannelQueue::new(100, DEFAULT_LIFETIME_MS).unwrap();
        queue.push(KIND_NOTIFICATION, note(1), 0).unwrap();
        let err = queue.push(KIND_NOTIFICATION, vec![0; 100], 0).unwrap_err();
        assert!(matches!(err, QueueError::TooLarge { .. }));
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.push(9, note(1), 0), Err(QueueError::Kind(9)));
    }

    #[test]
    fn lifetime_expiry_with_a_moved_clock() {
        let mut queue = ChannelQueue::new(DEFAULT_MAX_BYTES, 1_000).unwrap();
        queue.push(KIND_NOTIFICATION, note(1), 10_000).unwrap();
        queue.push(KIND_NOTIFICATION, note(2), 10_500).unwrap();
        assert_eq!(queue.expire(10_999), 0);
        assert_eq!(queue.expire(11_000), 1);
        assert_eq!(queue.len(), 1);
        let batch = queue.take_batch(10, 11_500).unwrap();
        assert!(batch.is_none());
        assert_eq!(queue.dropped_expired, 2);
        assert_eq!(queue.bytes_used(), 0);
    }

    #[test]
    fn batches_group_by_kind_in_queue_order() {
        let mut queue = ChannelQueue::new(DEFAULT_MAX_BYTES, DEFAULT_LIFETIME_MS).unwrap();
        queue
            .push(KIND_DE_REGISTRATION, b"\"d1\"".to_vec(), 0)
            .unwrap();
        queue.push(KIND_NOTIFICATION, note(1), 0).unwrap();
        queue
            .push(KIND_ASYNC_RESPONSE, b"{\"id\":\"a\"}".to_vec(), 0)
            .unwrap();
        queue.push(KIND_NOTIFICATION, note(2), 0).unwrap();
        let batch = queue.take_batch(10, 0).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(batch.body).unwrap(),
            r#"{"notifications":[{"n":1},{"n":2}],"de-registrations":["d1"],"async-responses":[{"id":"a"}]}"#
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn batch_size_limits() {
        let mut queue = ChannelQueue::new(DEFAULT_MAX_BYTES, DEFAULT_LIFETIME_MS).unwrap();
        for n in 0..20_001 {
            queue.push(KIND_NOTIFICATION, note(n), 0).unwrap();
        }
        assert_eq!(queue.take_batch(0, 0), Err(QueueError::BatchSize(0)));
        assert_eq!(
            queue.take_batch(20_001, 0),
            Err(QueueError::BatchSize(20_001))
        );
        assert_eq!(queue.take_batch(1, 0).unwrap().unwrap().events.len(), 1);
        let ten = queue.take_batch(DEFAULT_CHUNK_SIZE, 0).unwrap().unwrap();
        assert_eq!(ten.events.len(), 10_000);
        assert_eq!(ten.events[0].data, note(1));
        queue.put_back(ten);
        let twenty = queue.take_batch(MAX_CHUNK_SIZE, 0).unwrap().unwrap();
        assert_eq!(twenty.events.len(), 20_000);
        assert!(queue.is_empty());
    }

    #[test]
    fn put_back_keeps_order_and_timestamps() {
        let mut queue = ChannelQueue::new(DEFAULT_MAX_BYTES, DEFAULT_LIFETIME_MS).unwrap();
        for n in 0..5 {
            queue.push(KIND_NOTIFICATION, note(n), n as u64).unwrap();
        }
        let batch = queue.take_batch(3, 10).unwrap().unwrap();
        queue.push(KIND_NOTIFICATION, note(5), 11).unwrap();
        assert_eq!(queue.put_back(batch), 0);
        let order: Vec<_> = queue
            .iter()
            .map(|e| (e.data.clone(), e.queued_at_ms))
            .collect();
        let expected: Vec<_> = (0..5)
            .map(|n| (note(n), n as u64))
            .chain([(note(5), 11)])
            .collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn put_back_over_the_cap_drops_the_oldest() {
        let cost = 7 + EVENT_OVERHEAD_BYTES;
        let mut queue = ChannelQueue::new(2 * cost, DEFAULT_LIFETIME_MS).unwrap();
        queue.push(KIND_NOTIFICATION, note(1), 0).unwrap();
        queue.push(KIND_NOTIFICATION, note(2), 0).unwrap();
        let batch = queue.take_batch(2, 0).unwrap().unwrap();
        queue.push(KIND_NOTIFICATION, note(3), 0).unwrap();
        assert_eq!(queue.put_back(batch), 1);
        let kept: Vec<_> = queue.iter().map(|e| e.data.clone()).collect();
        assert_eq!(kept, vec![note(2), note(3)]);
    }

    #[test]
    fn constructor_rejects_zero_limits() {
        assert_eq!(ChannelQueue::new(0, 1).unwrap_err(), QueueError::ZeroCap);
        assert_eq!(
            ChannelQueue::new(1, 0).unwrap_err(),
            QueueError::ZeroLifetime
        );
    }

    proptest! {
        #[test]
        fn take_then_put_back_is_identity(
            kinds in proptest::collection::vec(0u8..6, 1..60), take in 1usize..80,
        ) {
            let mut queue = ChannelQueue::new(DEFAULT_MAX_BYTES, DEFAULT_LIFETIME_MS).unwrap();
            for (n, kind) in kinds.iter().enumerate() {
                queue.push(*kind, note(n), n as u64).unwrap();
            }
            let before: Vec<Event> = queue.iter().cloned().collect();
            let bytes = queue.bytes_used();
            let batch = queue.take_batch(take, 0).unwrap().unwrap();
            queue.put_back(batch);
            prop_assert_eq!(queue.iter().cloned().collect::<Vec<_>>(), before);
            prop_assert_eq!(queue.bytes_used(), bytes);
        }

        #[test]
        fn body_is_valid_json_with_every_event_once(kinds in proptest::collection::vec(0u8..6, 1..60)) {
            let events: Vec<Event> = kinds.iter().enumerate()
                .map(|(n, kind)| Event { kind: *kind, data: note(n), queued_at_ms: 0 }).collect();
            let body: serde_json::Value = serde_json::from_slice(&notification_message(&events)).unwrap();
            let object = body.as_object().unwrap();
            let mut seen = 0;
            for (kind, name) in KIND_NAMES.iter().enumerate() {
                let expected: Vec<usize> = kinds.iter().enumerate()
                    .filter(|(_, k)| usize::from(**k) == kind).map(|(n, _)| n).collect();
                match object.get(*name) {
                    None => prop_assert!(expected.is_empty()),
                    Some(array) => {
                        let got: Vec<usize> = array.as_array().unwrap().iter()
                            .map(|v| v["n"].as_u64().unwrap() as usize).collect();
                        prop_assert_eq!(&got, &expected);
                        seen += got.len();
                    }
                }
            }
            prop_assert_eq!(seen, kinds.len());
        }
    }
}
