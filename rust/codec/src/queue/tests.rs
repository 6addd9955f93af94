//! The channel queue: byte accounting, lifetimes, batches put back intact, and the NotificationMessage body as JSON.

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
    queue
        .push(KIND_FIRMWARE_UPDATE, b"{\"campaign\":\"c\"}".to_vec(), 0)
        .unwrap();
    let batch = queue.take_batch(10, 0).unwrap().unwrap();
    assert_eq!(
        String::from_utf8(batch.body).unwrap(),
        concat!(
            r#"{"notifications":[{"n":1},{"n":2}],"de-registrations":["d1"],"async-responses":[{"id":"a"}],"#,
            r#""firmware-updates":[{"campaign":"c"}]}"#
        )
    );
    assert!(queue.push(KIND_FIRMWARE_UPDATE + 1, note(3), 0).is_err()); // no eighth array
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

#[test]
fn dropped_events_are_handed_back_once_in_queue_order_with_their_cause() {
    let cost = 7 + EVENT_OVERHEAD_BYTES;
    let mut queue = ChannelQueue::new(3 * cost, 1_000).unwrap();
    for n in 1..=4 {
        queue.push(KIND_NOTIFICATION, note(n), n as u64).unwrap();
    }
    queue.expire(1_002); // queued at 2 and now 1002: 1000 ms old
    let dropped: Vec<_> = queue
        .take_dropped()
        .into_iter()
        .map(|(e, cause)| (e.data, e.queued_at_ms, cause))
        .collect();
    assert_eq!(
        dropped,
        vec![
            (note(1), 1, DropCause::ByteCap),
            (note(2), 2, DropCause::Lifetime)
        ]
    );
    assert!(queue.take_dropped().is_empty());
}

#[test]
fn dropped_events_not_taken_stay_within_one_cap() {
    let cost = 7 + EVENT_OVERHEAD_BYTES;
    let mut queue = ChannelQueue::new(2 * cost, DEFAULT_LIFETIME_MS).unwrap();
    for n in 1..=9 {
        queue.push(KIND_NOTIFICATION, note(n), 0).unwrap();
    }
    let kept: Vec<_> = queue
        .take_dropped()
        .into_iter()
        .map(|(e, _)| e.data)
        .collect();
    assert_eq!(kept, vec![note(6), note(7)]);
}
