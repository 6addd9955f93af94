//! Every way a CoAP datagram can be malformed or a message unencodable.

use thiserror::Error;

/// A malformed datagram, a pre-parsed option with a bad value, or an unencodable message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CoapError {
    /// The datagram (or the encoded message) is over [`super::MAX_MESSAGE_LEN`].
    #[error("CoAP message of {0} bytes exceeds the 64 KiB limit")]
    MessageTooLarge(usize),
    /// Fewer than the 4 fixed header bytes.
    #[error("CoAP message of {0} bytes is shorter than the 4-byte header")]
    TruncatedHeader(usize),
    /// A version other than 1 (RFC 7252 §3).
    #[error("CoAP version must be 1, got {0}")]
    BadVersion(u8),
    /// A token length of 9-15, or a token longer than 8 bytes to encode (RFC 7252 §3).
    #[error("CoAP token length must be 0-8, got {0}")]
    BadTokenLength(usize),
    /// The datagram ends inside the token.
    #[error("CoAP token of {length} bytes runs past the end of the message")]
    TruncatedToken {
        /// The token length stated in the header.
        length: usize,
    },
    /// A message type outside 0-3.
    #[error("CoAP message type must be 0-3, got {0}")]
    BadMessageType(u8),
    /// An Empty message (code 0.00) carrying a token, options or payload (RFC 7252 §4.1).
    #[error("a CoAP Empty message (code 0.00) must have no token, options or payload")]
    NonEmptyEmptyMessage,
    /// An option delta or length nibble of 15 in a byte that is not the payload marker
    /// (RFC 7252 §3.1).
    #[error("reserved option nibble 15 at offset {offset}")]
    ReservedNibble {
        /// Offset of the option's first byte.
        offset: usize,
    },
    /// The datagram ends inside an option header or value.
    #[error("truncated CoAP option at offset {offset}")]
    TruncatedOption {
        /// Offset of the option's first byte.
        offset: usize,
    },
    /// Option deltas that add up past 65 535.
    #[error("CoAP option number {0} exceeds 65535")]
    OptionNumberTooLarge(u32),
    /// An option value too long for the 2-byte extended length (over 65 804 bytes).
    #[error("CoAP option value of {0} bytes exceeds the 65804-byte maximum")]
    OptionTooLong(usize),
    /// A payload marker with no payload after it (RFC 7252 §3).
    #[error("CoAP payload marker followed by an empty payload")]
    EmptyPayload,
    /// A string option (Uri-Path, Uri-Query, Location-Path) that is not UTF-8.
    #[error("CoAP option {number} is not UTF-8")]
    InvalidUtf8 {
        /// The option number.
        number: u16,
    },
    /// A uint option longer than its format allows (RFC 7252 §5.10, RFC 7641 §2, RFC 7959 §2.1).
    #[error("CoAP option {number} must be at most {max} bytes, got {length}")]
    UintTooLong {
        /// The option number.
        number: u16,
        /// The value length.
        length: usize,
        /// The longest allowed value.
        max: usize,
    },
    /// A notification template given an Observe option: each notification supplies its own.
    #[error("a CoAP notification template must not carry the Observe option")]
    ObserveInTemplate,
    /// A Block1/Block2 size exponent of 7, which is reserved (RFC 7959 §2.2).
    #[error("CoAP option {number} uses the reserved block size exponent 7")]
    ReservedBlockSize {
        /// The option number (23 Block2, 27 Block1).
        number: u16,
    },
}
