//! The steady-state notification path of the plain CoAP/UDP listener, without Python per datagram (issue 15 #2).
//!
//! The Python server decides everything about an observation; once it has accepted a notification of one
//! over plain UDP it *arms* the observation here: (the device's address, the token) → a handle of the
//! caller's. Then [`ObserveLane::sift`] takes each datagram of a receive batch and recognises the ones the
//! server would accept the same way every time — a 2.xx NON or CON response with an Observe number, an armed
//! token, from the address the device is armed at, every critical option understood, no Block2 transfer to
//! fetch — and hands those over decoded; everything else goes to the Python path untouched. A CON one is
//! acknowledged here, and its message ID remembered, so its retransmissions get the same empty ACK again
//! (RFC 7252 §4.5) even after the token is disarmed.
//!
//! The server disarms whatever its own state changes under (an address given to another device, a
//! registration replaced, an observation ended, a request sent with the token). A datagram of an armed token
//! that goes to the Python path disarms the token, so that token's later datagrams of the same batch follow
//! it there, in order; the server arms it again when it accepts one.
//!
//! Ordering by Observe number (RFC 7641 §3.4) is not the lane's: the caller's handle carries the observation's
//! [`crate::observe_order::ObserveOrder`], which the Python path asks too.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use crate::coap::{self, MessageType};

/// What [`ObserveLane::sift`] made of a datagram.
#[derive(Debug, PartialEq)]
pub enum Sifted<'a, H> {
    /// Not one the lane recognises: the Python path takes it as it came.
    Slow,
    /// A retransmission of a CON notification this lane acknowledged: acknowledge it again, nothing else.
    Duplicate { mid: u16 },
    /// A notification of an armed observation (a CON one is acknowledged whatever its number says).
    Notification {
        handle: &'a H,
        seq: u32,
        content_format: Option<u16>,
        payload: &'a [u8],
        /// The message ID to acknowledge (a CON notification), None for a NON one.
        ack: Option<u16>,
    },
}

/// The empty ACK of message `mid` (RFC 7252 §3: version 1, type ACK, no token, code 0.00).
pub fn empty_ack(mid: u16) -> [u8; 4] {
    let [hi, lo] = mid.to_be_bytes();
    [0x60, 0x00, hi, lo]
}

struct ArmedDevice<H> {
    remote: SocketAddr,
    observations: HashMap<Vec<u8>, H>,
}

/// The (address, message ID) of the CON notifications acknowledged here, oldest first: at most `max`, each for
/// `lifetime` seconds.
struct AckedIds {
    at: HashMap<(SocketAddr, u16), f64>,
    order: VecDeque<(f64, SocketAddr, u16)>,
    max: usize,
    lifetime: f64,
}

impl AckedIds {
    fn contains(&self, remote: SocketAddr, mid: u16) -> bool {
        !self.at.is_empty() && self.at.contains_key(&(remote, mid))
    }

    fn remember(&mut self, remote: SocketAddr, mid: u16, now: f64) {
        self.at.insert((remote, mid), now);
        self.order.push_back((now, remote, mid));
        self.prune(now);
    }

    fn prune(&mut self, now: f64) {
        while let Some(&(at, remote, mid)) = self.order.front() {
            if now - at < self.lifetime && self.order.len() <= self.max {
                break;
            }
            self.order.pop_front();
            if self.at.get(&(remote, mid)) == Some(&at) {
                self.at.remove(&(remote, mid));
            }
        }
    }
}

/// Armed observations by device, and the CON notifications acknowledged here (bounded, aged out).
pub struct ObserveLane<H> {
    devices: HashMap<String, ArmedDevice<H>>,
    by_remote: HashMap<SocketAddr, String>,
    acked: AckedIds,
    max_datagram: usize,
}

impl<H> ObserveLane<H> {
    /// `max_acked` acknowledged message IDs are kept at most, each for `lifetime` seconds (EXCHANGE_LIFETIME);
    /// a datagram longer than `max_datagram` is left to the Python path (which drops it).
    pub fn new(max_acked: usize, lifetime: f64, max_datagram: usize) -> Self {
        Self {
            devices: HashMap::new(),
            by_remote: HashMap::new(),
            acked: AckedIds {
                at: HashMap::new(),
                order: VecDeque::new(),
                max: max_acked.max(1),
                lifetime,
            },
            max_datagram,
        }
    }

    /// Arm `token` of `device` at `remote`. The device's other observations stay armed if it is still at
    /// `remote`; whatever was armed at `remote` for another device, or for this device elsewhere, is disarmed.
    pub fn arm(&mut self, device: &str, remote: SocketAddr, token: &[u8], handle: H) {
        if let Some(other) = self.by_remote.get(&remote) {
            if other != device {
                let other = other.clone();
                self.disarm_device(&other);
            }
        }
        if self
            .devices
            .get(device)
            .is_some_and(|armed| armed.remote != remote)
        {
            self.disarm_device(device);
        }
        let armed = self
            .devices
            .entry(device.to_owned())
            .or_insert_with(|| ArmedDevice {
                remote,
                observations: HashMap::new(),
            });
        armed.observations.insert(token.to_vec(), handle);
        self.by_remote.insert(remote, device.to_owned());
    }

    /// Disarm every observation of `device`.
    pub fn disarm_device(&mut self, device: &str) {
        if let Some(armed) = self.devices.remove(device) {
            if self.by_remote.get(&armed.remote).map(String::as_str) == Some(device) {
                self.by_remote.remove(&armed.remote);
            }
        }
    }

    /// Disarm whichever device is armed at `remote`.
    pub fn disarm_remote(&mut self, remote: &SocketAddr) {
        if let Some(device) = self.by_remote.remove(remote) {
            self.devices.remove(&device);
        }
    }

    /// Disarm `token` of the device armed at `remote` (a request goes out with it).
    pub fn disarm_token(&mut self, remote: &SocketAddr, token: &[u8]) {
        if let Some(device) = self.by_remote.get(remote) {
            if let Some(armed) = self.devices.get_mut(device) {
                armed.observations.remove(token);
            }
        }
    }

    /// Disarm everything.
    pub fn clear(&mut self) {
        self.devices.clear();
        self.by_remote.clear();
    }

    /// How many observations are armed.
    pub fn armed(&self) -> usize {
        self.devices.values().map(|d| d.observations.len()).sum()
    }

    /// How many acknowledged message IDs are remembered.
    pub fn acked(&self) -> usize {
        self.acked.at.len()
    }

    /// Forget acknowledged message IDs older than the lifetime (also done by every `sift` of a CON datagram).
    pub fn prune(&mut self, now: f64) {
        self.acked.prune(now);
    }

    /// What to do with `data` from `remote` (see the module docs).
    pub fn sift<'a>(&'a mut self, data: &'a [u8], remote: SocketAddr, now: f64) -> Sifted<'a, H> {
        // version 1, type CON (RFC 7252 §3)
        let confirmable = data
            .first()
            .is_some_and(|b| b >> 6 == 1 && (b >> 4) & 0x3 == 0);
        if confirmable && data.len() >= 4 {
            let mid = u16::from_be_bytes([data[2], data[3]]);
            if self.acked.contains(remote, mid) {
                return Sifted::Duplicate { mid };
            }
        }
        if self.devices.is_empty() || data.len() > self.max_datagram {
            return Sifted::Slow;
        }
        let Ok(message) = coap::decode(data) else {
            return Sifted::Slow;
        };
        let Some(armed) = self
            .by_remote
            .get(&remote)
            .and_then(|device| self.devices.get_mut(device))
        else {
            return Sifted::Slow;
        };
        if !armed.observations.contains_key(&message.token) {
            return Sifted::Slow;
        }
        let Some((seq, content_format)) = fast_parts(&message) else {
            // this token's later datagrams follow this one to the Python path, in order
            armed.observations.remove(&message.token);
            return Sifted::Slow;
        };
        let ack = (message.mtype == MessageType::Confirmable).then_some(message.mid);
        if let Some(mid) = ack {
            self.acked.remember(remote, mid, now);
        }
        let start = data.len() - message.payload.len();
        Sifted::Notification {
            handle: &armed.observations[&message.token],
            seq,
            content_format,
            payload: &data[start..],
            ack,
        }
    }
}

/// (Observe number, Content-Format) of a message the server accepts the same way every time, or None: a 2.xx
/// NON or CON response with an Observe option, every critical option understood, no Block2 transfer.
fn fast_parts(message: &coap::Message) -> Option<(u32, Option<u16>)> {
    if !matches!(
        message.mtype,
        MessageType::NonConfirmable | MessageType::Confirmable
    ) || message.code >> 5 != 2
        || message.unrecognised_critical().is_some()
    {
        return None;
    }
    let seq = message.observe().ok()??;
    match message.block2().ok()? {
        Some(block) if block.num != 0 || block.more => return None,
        _ => {}
    }
    Some((seq, message.content_format().ok()?))
}

#[cfg(test)]
mod tests;
