//! Observe notifications from a template encoded once: per notification only the message ID,
//! the Observe value and the payload change (RFC 7641 §4.2), so a notifier that sends many
//! notifications of one observation copies bytes instead of encoding a message each time.

use super::encode::encode_parts_into;
use super::options::{encode_uint, OBSERVE};
use super::{CoapError, MessageType, MAX_MESSAGE_LEN, PAYLOAD_MARKER};

/// Largest Observe value: the option holds at most 3 bytes (RFC 7641 §2).
const MAX_OBSERVE: u32 = 0xFF_FFFF;

/// One observation's notification with the message ID, Observe value and payload left open.
///
/// The bytes are what [`super::encode_parts_into`] writes for the same message: the header and
/// token, the options numbered below Observe (6), then an Observe option whose header byte
/// depends only on the value's length (its delta from the option before is fixed), then the
/// other options, whose deltas do not depend on the Observe value at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationTemplate {
    /// Header (message ID bytes zero), token and the options numbered below Observe.
    head: Vec<u8>,
    /// Observe's delta from the option before it: 6 minus that option's number (0-6).
    observe_delta: u8,
    /// The options after Observe, their first delta counted from 6.
    tail: Vec<u8>,
}

impl NotificationTemplate {
    /// A template for notifications of type `mtype` and `code` on `token` with `options`
    /// (any order; Observe among them is refused: each notification supplies its own).
    pub fn new(
        mtype: MessageType,
        code: u8,
        token: &[u8],
        options: &[(u16, &[u8])],
    ) -> Result<Self, CoapError> {
        if options.iter().any(|&(number, _)| number == OBSERVE) {
            return Err(CoapError::ObserveInTemplate);
        }
        let mut before: Vec<(u16, &[u8])> = options
            .iter()
            .copied()
            .filter(|&(n, _)| n < OBSERVE)
            .collect();
        let mut after: Vec<(u16, &[u8])> = options
            .iter()
            .copied()
            .filter(|&(n, _)| n > OBSERVE)
            .collect();
        let mut head = Vec::new();
        encode_parts_into(&mut head, mtype, code, 0, token, &mut before, &[])?;
        before.sort_by_key(|&(number, _)| number);
        let previous = before.last().map_or(0, |&(number, _)| number);
        // Encode the later options behind an empty Observe and cut it off: their deltas are
        // then counted from 6, as in every notification.
        after.insert(0, (OBSERVE, &[]));
        let mut tail = Vec::new();
        encode_parts_into(&mut tail, mtype, code, 0, &[], &mut after, &[])?;
        tail.drain(..5); // the 4-byte header and the empty Observe's one header byte
        Ok(Self {
            head,
            observe_delta: (OBSERVE - previous) as u8,
            tail,
        })
    }

    /// Append one notification with message ID `mid`, Observe value `observe` (0-2^24-1) and
    /// `payload` to `out`; on error `out` is left unchanged.
    pub fn encode_into(
        &self,
        out: &mut Vec<u8>,
        mid: u16,
        observe: u32,
        payload: &[u8],
    ) -> Result<(), CoapError> {
        if observe > MAX_OBSERVE {
            return Err(CoapError::UintTooLong {
                number: OBSERVE,
                length: 4,
                max: 3,
            });
        }
        let value = encode_uint(u64::from(observe));
        let marker = usize::from(!payload.is_empty());
        let total = self.len_without(value.len()) + marker + payload.len();
        if total > MAX_MESSAGE_LEN {
            return Err(CoapError::MessageTooLarge(total));
        }
        out.reserve(total);
        out.extend_from_slice(&self.head[..2]);
        out.extend_from_slice(&mid.to_be_bytes());
        out.extend_from_slice(&self.head[4..]);
        out.push(self.observe_delta << 4 | value.len() as u8);
        out.extend_from_slice(&value);
        out.extend_from_slice(&self.tail);
        if marker == 1 {
            out.push(PAYLOAD_MARKER);
            out.extend_from_slice(payload);
        }
        Ok(())
    }

    /// One notification as a new buffer (see [`Self::encode_into`]).
    pub fn encode(&self, mid: u16, observe: u32, payload: &[u8]) -> Result<Vec<u8>, CoapError> {
        let mut out = Vec::new();
        self.encode_into(&mut out, mid, observe, payload)?;
        Ok(out)
    }

    /// The datagram's size without the payload, for an Observe value of `observe_len` bytes.
    fn len_without(&self, observe_len: usize) -> usize {
        self.head.len() + 1 + observe_len + self.tail.len()
    }
}
