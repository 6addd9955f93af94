//! The freshness rule, tested once (issue 29 #6): against RFC 7641 §3.4's text for every pair of 24-bit numbers
//! and times, at its edges, and what taking a number does to the order.

use proptest::prelude::*;

use super::*;

/// RFC 7641 §3.4 as written, in wide integers so no subtraction wraps: "the incoming notification was sent later
/// than [the latest one] if (V1 < V2 and V2 - V1 < 2^23) or (V1 > V2 and V1 - V2 > 2^23) or (T2 > T1 + 128
/// seconds)".
fn rfc_7641_fresher(v1: u32, t1: f64, v2: u32, t2: f64) -> bool {
    let (v1, v2) = (i64::from(v1), i64::from(v2));
    (v1 < v2 && v2 - v1 < 1 << 23) || (v1 > v2 && v1 - v2 > 1 << 23) || t2 > t1 + 128.0
}

const OBSERVE_NUMBERS: std::ops::Range<u32> = 0..1 << 24; // the Observe option carries 24 bits

proptest! {
    #[test]
    fn newer_is_exactly_rfc_7641s_rule(
        v1 in OBSERVE_NUMBERS, t1 in 0.0..1e6f64, v2 in OBSERVE_NUMBERS, later in 0.0..1e3f64,
    ) {
        let t2 = t1 + later;
        prop_assert_eq!(newer(Some(v1), t1, v2, t2), rfc_7641_fresher(v1, t1, v2, t2));
    }

    #[test]
    fn newer_is_exactly_rfc_7641s_rule_near_half_the_number_space_and_128_seconds(
        v1 in OBSERVE_NUMBERS, offset in (1u32 << 23) - 2..(1 << 23) + 3, back in any::<bool>(),
        later in prop_oneof![Just(FRESHNESS), Just(FRESHNESS + 1e-9), 127.9..128.1f64],
    ) {
        // the edges the uniform draw above rarely hits: a distance of 2^23 ± 2 either way, and T2 - T1 around 128 s
        let v2 = if back { v1.wrapping_sub(offset) } else { v1.wrapping_add(offset) } % (1 << 24);
        prop_assert_eq!(newer(Some(v1), 0.0, v2, later), rfc_7641_fresher(v1, 0.0, v2, later));
    }

    #[test]
    fn the_first_number_of_a_stream_is_always_taken(v2 in OBSERVE_NUMBERS, t2 in 0.0..1e6f64) {
        prop_assert!(ObserveOrder::default().advance(v2, t2));
    }

    #[test]
    fn a_number_is_taken_exactly_when_newer_and_a_stale_one_changes_nothing(
        v1 in OBSERVE_NUMBERS, t1 in 0.0..1e6f64, v2 in OBSERVE_NUMBERS, later in 0.0..1e3f64,
    ) {
        let before = ObserveOrder::new(Some(v1), t1);
        let mut order = before;
        let taken = order.advance(v2, t1 + later);
        prop_assert_eq!(taken, rfc_7641_fresher(v1, t1, v2, t1 + later));
        let expected = if taken { ObserveOrder::new(Some(v2), t1 + later) } else { before };
        prop_assert_eq!(order, expected);
    }
}

#[test]
fn the_rule_at_its_edges() {
    assert!(newer(Some(5), 0.0, 6, 1.0));
    assert!(!newer(Some(6), 0.0, 5, 1.0), "older");
    assert!(!newer(Some(6), 0.0, 6, 1.0), "the same number again");
    assert!(
        !newer(Some(0), 0.0, 1 << 23, 1.0),
        "exactly half the space ahead"
    );
    assert!(
        newer(Some(0), 0.0, (1 << 23) - 1, 1.0),
        "just under half the space ahead"
    );
    assert!(newer(Some((1 << 23) + 1), 0.0, 0, 1.0), "wrapped around");
    assert!(
        newer(Some((1 << 24) - 1), 0.0, 0, 1.0),
        "wrapped around by one"
    );
    assert!(
        !newer(Some(6), 0.0, 5, FRESHNESS),
        "128 s exactly: still judged by number"
    );
    assert!(
        newer(Some(6), 0.0, 5, FRESHNESS + 0.001),
        "later than 128 s: any number"
    );
    assert!(newer(None, 0.0, 0, 0.0), "nothing taken yet");
}

#[test]
fn a_restarted_stream_takes_its_first_number_whatever_the_old_one_was() {
    let mut order = ObserveOrder::new(Some(40), 10.0);
    order.restart(None, 11.0);
    assert!(order.advance(0, 11.5), "Observe 0 of the new stream");
    order.restart(Some(3), 12.0);
    assert_eq!((order.last(), order.last_at()), (Some(3), 12.0));
    assert!(!order.advance(2, 12.5));
}
