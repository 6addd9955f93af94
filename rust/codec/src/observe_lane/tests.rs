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

#[test]
fn a_token_longer_than_coap_allows_is_not_armed() {
    let mut lane: ObserveLane<u32> = ObserveLane::new(100, 247.0, 1500);
    assert!(!lane.arm(DEVICE, addr(5683), &[1; 9], 7));
    assert_eq!(lane.armed(), 0, "no datagram can carry it (RFC 7252 §3)");
    assert!(lane.arm(DEVICE, addr(5683), &[1; 8], 7));
    assert_eq!(lane.armed(), 1);
}

#[test]
fn arming_a_token_again_replaces_its_handle() {
    let mut lane = armed_lane();
    lane.arm(DEVICE, addr(5683), TOKEN, 8);
    assert_eq!(lane.armed(), 1);
    let data = notification(MessageType::NonConfirmable, 1, 1, b"");
    assert!(matches!(
        lane.sift(&data, addr(5683), 1.0),
        Sifted::Notification { handle: &8, .. }
    ));
}

#[test]
fn a_device_whose_tokens_were_all_disarmed_stays_armed_at_its_address() {
    // its next observation arms beside nothing; another device arming there disarms it
    let mut lane = armed_lane();
    lane.disarm_token(&addr(5683), TOKEN);
    assert_eq!(lane.armed(), 0);
    lane.arm(DEVICE, addr(5683), &[7], 2);
    lane.arm("dev-2", addr(6000), &[8], 3);
    assert_eq!(lane.armed(), 2);
    lane.disarm_device(DEVICE);
    assert_eq!(lane.armed(), 1);
}

#[test]
fn each_of_many_devices_is_found_by_its_address_and_token() {
    let mut lane: ObserveLane<u32> = ObserveLane::new(100, 247.0, 1500);
    let token = |n: u32| (n * 7919).to_be_bytes();
    for n in 0..20_000u32 {
        lane.arm(&format!("dev-{n}"), addr(n as u16 + 1), &token(n), n);
    }
    assert_eq!(lane.armed(), 20_000);
    for n in (0..20_000u32).step_by(7) {
        let data = datagram(
            MessageType::NonConfirmable,
            0x45,
            1,
            &token(n),
            &[(options::OBSERVE, &[1])],
            b"",
        );
        assert_eq!(
            lane.sift(&data, addr(n as u16 + 1), 1.0),
            Sifted::Notification {
                handle: &n,
                seq: 1,
                content_format: None,
                payload: b"",
                ack: None
            }
        );
        let elsewhere = addr((n as u16 + 1) % 20_000 + 1);
        assert_eq!(lane.sift(&data, elsewhere, 1.0), Sifted::Slow);
    }
}

/// The lane's arming rules as they were written before the flat table (issue 30 #2): devices by id, each at one
/// address with its tokens, and which device is at an address.
#[derive(Default)]
struct Model {
    devices:
        std::collections::HashMap<String, (SocketAddr, std::collections::HashMap<Vec<u8>, u32>)>,
    by_remote: std::collections::HashMap<SocketAddr, String>,
}

impl Model {
    fn arm(&mut self, device: &str, remote: SocketAddr, token: &[u8], handle: u32) {
        if let Some(other) = self.by_remote.get(&remote).cloned() {
            if other != device {
                self.disarm_device(&other);
            }
        }
        if self.devices.get(device).is_some_and(|d| d.0 != remote) {
            self.disarm_device(device);
        }
        let entry = self
            .devices
            .entry(device.to_owned())
            .or_insert_with(|| (remote, Default::default()));
        entry.1.insert(token.to_vec(), handle);
        self.by_remote.insert(remote, device.to_owned());
    }

    fn disarm_device(&mut self, device: &str) {
        if let Some((remote, _)) = self.devices.remove(device) {
            if self.by_remote.get(&remote).map(String::as_str) == Some(device) {
                self.by_remote.remove(&remote);
            }
        }
    }

    fn disarm_remote(&mut self, remote: &SocketAddr) {
        if let Some(device) = self.by_remote.remove(remote) {
            self.devices.remove(&device);
        }
    }

    fn disarm_token(&mut self, remote: &SocketAddr, token: &[u8]) {
        if let Some(device) = self.by_remote.get(remote) {
            if let Some(d) = self.devices.get_mut(device) {
                d.1.remove(token);
            }
        }
    }

    fn handle(&self, remote: &SocketAddr, token: &[u8]) -> Option<u32> {
        let device = self.by_remote.get(remote)?;
        self.devices.get(device)?.1.get(token).copied()
    }

    fn armed(&self) -> usize {
        self.devices.values().map(|d| d.1.len()).sum()
    }
}

#[derive(Debug, Clone)]
enum Step {
    Arm(u8, u8, u8),
    DisarmDevice(u8),
    DisarmRemote(u8),
    DisarmToken(u8, u8),
    /// A datagram the server must judge (no Observe number): it disarms the token
    Judge(u8, u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..4u8, 0..4u8, 0..3u8).prop_map(|(d, a, t)| Step::Arm(d, a, t)),
        (0..4u8).prop_map(Step::DisarmDevice),
        (0..4u8).prop_map(Step::DisarmRemote),
        (0..4u8, 0..3u8).prop_map(|(a, t)| Step::DisarmToken(a, t)),
        (0..4u8, 0..3u8).prop_map(|(a, t)| Step::Judge(a, t)),
    ]
}

proptest! {
    #[test]
    fn the_flat_table_keeps_the_arming_rules(steps in proptest::collection::vec(step(), 0..40)) {
        let mut lane: ObserveLane<u32> = ObserveLane::new(100, 247.0, 1500);
        let mut model = Model::default();
        for (n, step) in steps.iter().enumerate() {
            let handle = n as u32;
            match *step {
                Step::Arm(d, a, t) => {
                    lane.arm(&format!("dev-{d}"), addr(a.into()), &[t], handle);
                    model.arm(&format!("dev-{d}"), addr(a.into()), &[t], handle);
                }
                Step::DisarmDevice(d) => {
                    lane.disarm_device(&format!("dev-{d}"));
                    model.disarm_device(&format!("dev-{d}"));
                }
                Step::DisarmRemote(a) => {
                    lane.disarm_remote(&addr(a.into()));
                    model.disarm_remote(&addr(a.into()));
                }
                Step::DisarmToken(a, t) => {
                    lane.disarm_token(&addr(a.into()), &[t]);
                    model.disarm_token(&addr(a.into()), &[t]);
                }
                Step::Judge(a, t) => {
                    let data = datagram(MessageType::NonConfirmable, 0x45, 1, &[t], &[], b"");
                    prop_assert_eq!(lane.sift(&data, addr(a.into()), 1.0), Sifted::Slow);
                    model.disarm_token(&addr(a.into()), &[t]);
                }
            }
            prop_assert_eq!(lane.armed(), model.armed(), "after {:?}", step);
            for a in 0..4u8 {
                for t in 0..3u8 {
                    let data = datagram(
                        MessageType::NonConfirmable, 0x45, 1, &[t], &[(options::OBSERVE, &[1])], b"",
                    );
                    let got = match lane.sift(&data, addr(a.into()), 1.0) {
                        Sifted::Notification { handle, .. } => Some(*handle),
                        _ => None,
                    };
                    prop_assert_eq!(got, model.handle(&addr(a.into()), &[t]), "after {:?}", step);
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_datagrams_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut lane = armed_lane();
        let _ = lane.sift(&data, addr(5683), 1.0);
        let _ = lane.sift(&data, addr(5683), 2.0);
    }
}
