//! Every way OMA-TLV input can be malformed or a tree unencodable.

use thiserror::Error;

use super::TlvKind;

/// A malformed TLV run, an invalid tree, or a value of the wrong size for its type.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TlvError {
    /// The whole input is over [`super::MAX_INPUT_LEN`].
    #[error("TLV input of {0} bytes exceeds the 16 MiB limit")]
    InputTooLarge(usize),
    /// The input ends inside a type byte, identifier or length field.
    #[error("truncated TLV header at offset {offset}")]
    TruncatedHeader {
        /// Offset of the TLV's type byte in the input.
        offset: usize,
    },
    /// A TLV's length runs past the end of its input (or of its parent).
    #[error("TLV at offset {offset} declares {length} value bytes but only {available} remain")]
    LengthPastEnd {
        /// Offset of the TLV's type byte in the input.
        offset: usize,
        /// The declared value length.
        length: usize,
        /// Bytes left after the header.
        available: usize,
    },
    /// A child whose kind may not appear inside its parent (spec §6 nesting rules).
    #[error("a {child} TLV cannot be inside a {parent}")]
    BadNesting {
        /// The container kind.
        parent: TlvKind,
        /// The offending child kind.
        child: TlvKind,
    },
    /// A value (or a container's encoded children) longer than the 24-bit length field allows.
    #[error("TLV value of {0} bytes exceeds the 16 777 215-byte maximum")]
    ValueTooLong(usize),
    /// An integer, time or unsigned value not 1, 2, 4 or 8 bytes long.
    #[error("TLV integer must be 1, 2, 4 or 8 bytes, got {0}")]
    BadIntegerLength(usize),
    /// A float value not 4 or 8 bytes long.
    #[error("TLV float must be 4 or 8 bytes, got {0}")]
    BadFloatLength(usize),
    /// A boolean value not exactly 1 byte long.
    #[error("TLV boolean must be 1 byte, got {0}")]
    BadBooleanLength(usize),
    /// A boolean byte other than 0 or 1.
    #[error("TLV boolean must be 0 or 1, got {0}")]
    BadBooleanValue(u8),
    /// An objlnk value not exactly 4 bytes long.
    #[error("TLV objlnk must be 4 bytes, got {0}")]
    BadObjlnkLength(usize),
    /// A string value that is not UTF-8.
    #[error("TLV string is not UTF-8 (valid up to byte {valid_up_to})")]
    InvalidUtf8 {
        /// Length of the valid UTF-8 prefix.
        valid_up_to: usize,
    },
}
