//! The CoAP message codec (RFC 7252 §3, with Observe RFC 7641 and Block1/Block2 RFC 7959).
//!
//! A datagram decodes to an owned [`Message`] whose options stay raw `(number, bytes)` in wire
//! order; the options devicehub reads (Uri-Path, Uri-Query, Location-Path, Observe,
//! Content-Format, Accept, Block1, Block2) are checked at decode time, so their accessors on a
//! decoded message cannot fail. Encoding sorts options by number (stable) and writes the
//! shortest delta/length forms.
//!
//! - [`decode`] / [`encode`] / [`encode_parts_into`]: the message codec.
//! - [`NotificationTemplate`]: Observe notifications encoded once, patched per notification.
//! - [`options`]: option numbers, the uint option codec and the per-option checks.
//! - [`CoapError`]: every way a datagram can be malformed or a message unencodable.

mod decode;
mod encode;
mod error;
mod message;
mod notify;
pub mod options;

#[cfg(test)]
mod tests;

pub use decode::decode;
pub use encode::{encode, encode_into, encode_parts_into, encoded_len};
pub use error::CoapError;
pub use message::{Block, CoapOption, Message, MessageType};
pub use notify::NotificationTemplate;

/// Largest datagram `decode` accepts and `encode` produces: 64 KiB. A UDP datagram cannot be
/// larger (65 507 B over IPv4), and the bound caps the work and memory one hostile input costs.
pub const MAX_MESSAGE_LEN: usize = 64 * 1024;

/// Longest token (RFC 7252 §3: token length 0-8; 9-15 are reserved).
pub const MAX_TOKEN_LEN: usize = 8;

/// Largest option delta or length the 4-bit nibble plus a 2-byte extension can state:
/// 65 535 + 269 (RFC 7252 §3.1).
pub const MAX_OPTION_EXTENDED: usize = 0xFFFF + 269;

/// The byte that ends the options and starts a non-empty payload (RFC 7252 §3).
pub const PAYLOAD_MARKER: u8 = 0xFF;
