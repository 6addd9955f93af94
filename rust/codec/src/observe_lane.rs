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

use crate::coap::{self, MessageType, MAX_TOKEN_LEN};

/// The lane's tables hash with foldhash, keyed at random per table (what hashbrown uses by default): a lookup
/// per datagram costs a few nanoseconds where SipHash costs tens. The keys are peer addresses and tokens, which a
/// peer chooses, but only an armed observation's (a device the server accepted a notification from) is ever
/// inserted, and the per-table seed keeps a list of colliding keys from working on every table.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

fn map<K, V>() -> Map<K, V> {
    HashMap::with_hasher(foldhash::fast::RandomState::default())
}

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

/// A token held inline (RFC 7252 §3: 0-8 bytes), so that a key is one flat value: no pointer to chase.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Token {
    len: u8,
    bytes: [u8; MAX_TOKEN_LEN],
}

impl Token {
    fn new(token: &[u8]) -> Option<Self> {
        let mut bytes = [0; MAX_TOKEN_LEN];
        bytes.get_mut(..token.len())?.copy_from_slice(token);
        Some(Self {
            len: token.len() as u8,
            bytes,
        })
    }
}

/// An armed observation's key: the device's address and the token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    remote: SocketAddr,
    token: Token,
}

/// Who is armed at an address, and with which tokens (what disarming by device or address needs).
struct ArmedRemote {
    device: String,
    tokens: Vec<Token>,
}

/// The (address, message ID) of the CON notifications acknowledged here, oldest first: at most `max`, each for
/// `lifetime` seconds.
struct AckedIds {
    at: Map<(SocketAddr, u16), f64>,
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

/// Armed observations, and the CON notifications acknowledged here (bounded, aged out).
///
/// A datagram costs one look-up in one flat table, (address, token) → handle, whatever the number of devices
/// (issue 30 #2): the tables by address and by device are for arming and disarming only.
pub struct ObserveLane<H> {
    armed: Map<Key, H>,
    remotes: Map<SocketAddr, ArmedRemote>,
    devices: Map<String, SocketAddr>,
    acked: AckedIds,
    max_datagram: usize,
}

impl<H> ObserveLane<H> {
    /// `max_acked` acknowledged message IDs are kept at most, each for `lifetime` seconds (EXCHANGE_LIFETIME);
    /// a datagram longer than `max_datagram` is left to the Python path (which drops it).
    pub fn new(max_acked: usize, lifetime: f64, max_datagram: usize) -> Self {
        Self {
            armed: map(),
            remotes: map(),
            devices: map(),
            acked: AckedIds {
                at: map(),
                order: VecDeque::new(),
                max: max_acked.max(1),
                lifetime,
            },
            max_datagram,
        }
    }

    /// Arm `token` of `device` at `remote`. The device's other observations stay armed if it is still at
    /// `remote`; whatever was armed at `remote` for another device, or for this device elsewhere, is disarmed.
    /// A token longer than CoAP allows (8 bytes) is not armed: false.
    pub fn arm(&mut self, device: &str, remote: SocketAddr, token: &[u8], handle: H) -> bool {
        let Some(token) = Token::new(token) else {
            return false;
        };
        if self
            .remotes
            .get(&remote)
            .is_some_and(|armed| armed.device != device)
        {
            self.disarm_remote(&remote);
        }
        if let Some(&elsewhere) = self.devices.get(device) {
            if elsewhere != remote {
                self.disarm_remote(&elsewhere);
            }
        }
        let armed = self.remotes.entry(remote).or_insert_with(|| {
            self.devices.insert(device.to_owned(), remote);
            ArmedRemote {
                device: device.to_owned(),
                tokens: Vec::new(),
            }
        });
        if !armed.tokens.contains(&token) {
            armed.tokens.push(token);
        }
        self.armed.insert(Key { remote, token }, handle);
        true
    }

    /// Disarm every observation of `device`.
    pub fn disarm_device(&mut self, device: &str) {
        if let Some(remote) = self.devices.get(device).copied() {
            self.disarm_remote(&remote);
        }
    }

    /// Disarm whichever device is armed at `remote`.
    pub fn disarm_remote(&mut self, remote: &SocketAddr) {
        let Some(armed) = self.remotes.remove(remote) else {
            return;
        };
        self.devices.remove(&armed.device);
        for token in armed.tokens {
            self.armed.remove(&Key {
                remote: *remote,
                token,
            });
        }
    }

    /// Disarm `token` of the device armed at `remote` (a request goes out with it).
    pub fn disarm_token(&mut self, remote: &SocketAddr, token: &[u8]) {
        if let Some(token) = Token::new(token) {
            self.disarm_key(Key {
                remote: *remote,
                token,
            });
        }
    }

    /// Disarm one observation; the device stays armed at its address with its others (none, maybe).
    fn disarm_key(&mut self, key: Key) {
        if self.armed.remove(&key).is_some() {
            if let Some(armed) = self.remotes.get_mut(&key.remote) {
                armed.tokens.retain(|token| *token != key.token);
            }
        }
    }

    /// Disarm everything.
    pub fn clear(&mut self) {
        self.armed.clear();
        self.remotes.clear();
        self.devices.clear();
    }

    /// How many observations are armed.
    pub fn armed(&self) -> usize {
        self.armed.len()
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
        if self.armed.is_empty() || data.len() > self.max_datagram {
            return Sifted::Slow;
        }
        let Ok(message) = coap::decode(data) else {
            return Sifted::Slow;
        };
        let Some(token) = Token::new(&message.token) else {
            return Sifted::Slow;
        };
        let key = Key { remote, token };
        let Some((seq, content_format)) = fast_parts(&message) else {
            // this token's later datagrams follow this one to the Python path, in order
            self.disarm_key(key);
            return Sifted::Slow;
        };
        let Some(handle) = self.armed.get(&key) else {
            return Sifted::Slow;
        };
        let ack = (message.mtype == MessageType::Confirmable).then_some(message.mid);
        if let Some(mid) = ack {
            self.acked.remember(remote, mid, now);
        }
        let start = data.len() - message.payload.len();
        Sifted::Notification {
            handle,
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
