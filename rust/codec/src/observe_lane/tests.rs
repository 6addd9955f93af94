//! The lane against datagrams built with the crate's own encoder: what it recognises, what it leaves to the
//! Python path (and disarms), its acknowledgements and their retransmissions, and the disarming rules.

use std::net::SocketAddr;

use proptest::prelude::*;

use super::*;
use crate::coap::{encode_parts_into, options};

const DEVICE: &str = "dev-1";
const TOKEN: &[u8] = &[1, 2, 3, 4];

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn datagram(
    mtype: MessageType,
    code: u8,
    mid: u16,
    token: &[u8],
    opts: &[(u16, &[u8])],
    payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut opts = opts.to_vec();
    encode_parts_into(&mut out, mtype, code, mid, token, &mut opts, payload).unwrap();
    out
}

/// A 2.05 notification with Observe `seq`, Content-Format 0 and `payload`.
fn notification(mtype: MessageType, mid: u16, seq: u8, payload: &[u8]) -> Vec<u8> {
    datagram(
        mtype,
        0x45,
        mid,
        TOKEN,
        &[(options::OBSERVE, &[seq]), (options::CONTENT_FORMAT, &[])],
        payload,
    )
}

fn armed_lane() -> ObserveLane<u32> {
    let mut lane = ObserveLane::new(100, 247.0, 1500);
    lane.arm(DEVICE, addr(5683), TOKEN, 7);
    lane
}

#[test]
fn an_armed_non_notification_is_handed_over_decoded_without_an_ack() {
    let mut lane = armed_lane();
    let data = notification(MessageType::NonConfirmable, 10, 5, b"21.5");
    assert_eq!(
        lane.sift(&data, addr(5683), 1.0),
        Sifted::Notification {
            handle: &7,
            seq: 5,
            content_format: Some(0),
            payload: b"21.5",
            ack: None
        }
    );
    assert_eq!(lane.acked(), 0);
}

#[test]
fn a_con_notification_is_acknowledged_and_its_retransmission_is_a_duplicate_even_once_disarmed() {
    let mut lane = armed_lane();
    let data = notification(MessageType::Confirmable, 0x1234, 5, b"x");
    assert!(matches!(
        lane.sift(&data, addr(5683), 1.0),
        Sifted::Notification {
            ack: Some(0x1234),
            ..
        }
    ));
    lane.clear();
    assert_eq!(
        lane.sift(&data, addr(5683), 2.0),
        Sifted::Duplicate { mid: 0x1234 }
    );
    // the same message ID from another address is another message
    assert_eq!(lane.sift(&data, addr(5684), 2.0), Sifted::Slow);
    assert_eq!(empty_ack(0x1234), [0x60, 0x00, 0x12, 0x34]);
}

#[test]
fn acknowledged_ids_age_out_after_the_lifetime_and_are_bounded() {
    let mut lane: ObserveLane<u32> = ObserveLane::new(3, 10.0, 1500);
    lane.arm(DEVICE, addr(5683), TOKEN, 7);
    for mid in 0..5u16 {
        let data = notification(MessageType::Confirmable, mid, mid as u8, b"");
        lane.sift(&data, addr(5683), 1.0);
    }
    assert_eq!(lane.acked(), 3, "the oldest beyond the bound are forgotten");
    lane.prune(11.5);
    assert_eq!(lane.acked(), 0);
    let first = notification(MessageType::Confirmable, 4, 9, b"");
    assert!(matches!(
        lane.sift(&first, addr(5683), 12.0),
        Sifted::Notification { .. }
    ));
}

#[test]
fn what_the_server_must_judge_goes_to_the_python_path_and_disarms_the_token() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "an error response ends the observation",
            datagram(
                MessageType::NonConfirmable,
                0x84,
                1,
                TOKEN,
                &[(options::OBSERVE, &[3])],
                b"",
            ),
        ),
        (
            "no Observe number",
            datagram(MessageType::NonConfirmable, 0x45, 1, TOKEN, &[], b"1"),
        ),
        (
            "a first Block2 block with more to fetch",
            datagram(
                MessageType::NonConfirmable,
                0x45,
                1,
                TOKEN,
                &[(options::OBSERVE, &[3]), (options::BLOCK2, &[0x0A])],
                b"1",
            ),
        ),
        (
            "an unrecognised critical option",
            datagram(
                MessageType::NonConfirmable,
                0x45,
                1,
                TOKEN,
                &[(options::OBSERVE, &[3]), (9, b"x")],
                b"1",
            ),
        ),
    ];
    for (why, data) in cases {
        let mut lane = armed_lane();
        assert_eq!(lane.sift(&data, addr(5683), 1.0), Sifted::Slow, "{why}");
        assert_eq!(
            lane.armed(),
            0,
            "{why}: the token's later datagrams follow it"
        );
    }
}

#[test]
fn a_block2_notification_in_one_block_is_recognised() {
    let mut lane = armed_lane();
    let data = datagram(
        MessageType::NonConfirmable,
        0x45,
        1,
        TOKEN,
        &[(options::OBSERVE, &[3]), (options::BLOCK2, &[0x02])],
        b"1",
    );
    assert!(matches!(
        lane.sift(&data, addr(5683), 1.0),
        Sifted::Notification { seq: 3, .. }
    ));
}

#[test]
fn unknown_tokens_other_addresses_requests_and_malformed_datagrams_are_left_alone() {
    let mut lane = armed_lane();
    let other_token = datagram(
        MessageType::NonConfirmable,
        0x45,
        1,
        &[9, 9],
        &[(options::OBSERVE, &[3])],
        b"1",
    );
    assert_eq!(lane.sift(&other_token, addr(5683), 1.0), Sifted::Slow);
    let data = notification(MessageType::NonConfirmable, 2, 5, b"1");
    assert_eq!(
        lane.sift(&data, addr(6000), 1.0),
        Sifted::Slow,
        "another address"
    );
    let request = datagram(
        MessageType::Confirmable,
        0x02,
        3,
        &[8],
        &[(options::URI_PATH, b"rd")],
        b"",
    );
    assert_eq!(lane.sift(&request, addr(5683), 1.0), Sifted::Slow);
    assert_eq!(
        lane.sift(&[0x50, 0x45], addr(5683), 1.0),
        Sifted::Slow,
        "a truncated header"
    );
    assert_eq!(
        lane.sift(&data[..data.len() - 1], addr(5683), 1.0),
        Sifted::Slow,
        "a payload marker without payload is a format error"
    );
    let long = notification(MessageType::NonConfirmable, 4, 6, &[b'x'; 1600]);
    assert_eq!(
        lane.sift(&long, addr(5683), 1.0),
        Sifted::Slow,
        "longer than the datagram bound"
    );
    assert_eq!(lane.armed(), 1, "none of these disarm the token");
}

#[test]
fn arming_at_an_address_another_device_held_disarms_that_device() {
    let mut lane = armed_lane();
    lane.arm("dev-2", addr(5683), &[5, 5], 8);
    assert_eq!(lane.armed(), 1);
    assert_eq!(
        lane.sift(
            &notification(MessageType::NonConfirmable, 1, 1, b""),
            addr(5683),
            1.0
        ),
        Sifted::Slow
    );
    // and a device armed again elsewhere keeps nothing of its old address
    lane.arm("dev-2", addr(7000), &[6, 6], 9);
    assert_eq!(lane.armed(), 1);
    let moved = datagram(
        MessageType::NonConfirmable,
        0x45,
        2,
        &[5, 5],
        &[(options::OBSERVE, &[2])],
        b"",
    );
    assert_eq!(lane.sift(&moved, addr(5683), 1.0), Sifted::Slow);
}

#[test]
fn disarming_by_device_address_and_token() {
    let mut lane = armed_lane();
    lane.arm(DEVICE, addr(5683), &[7], 2);
    lane.disarm_token(&addr(5683), TOKEN);
    assert_eq!(lane.armed(), 1);
    lane.disarm_remote(&addr(5683));
    assert_eq!(lane.armed(), 0);
    let mut lane = armed_lane();
    lane.disarm_device(DEVICE);
    assert_eq!(lane.armed(), 0);
    assert_eq!(
        lane.sift(
            &notification(MessageType::NonConfirmable, 1, 1, b""),
            addr(5683),
            1.0
        ),
        Sifted::Slow
    );
}

proptest! {
    #[test]
    fn arbitrary_datagrams_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut lane = armed_lane();
        let _ = lane.sift(&data, addr(5683), 1.0);
        let _ = lane.sift(&data, addr(5683), 2.0);
    }
}
