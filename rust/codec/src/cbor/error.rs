//! Every way CBOR input can be malformed, or an LwM2M / SenML document invalid or unencodable.

use thiserror::Error;

/// Malformed CBOR, a document that breaks the LwM2M CBOR or SenML rules, or unencodable entries.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CborError {
    /// The whole input is over [`super::MAX_INPUT_LEN`].
    #[error("CBOR input of {0} bytes exceeds the 16 MiB limit")]
    InputTooLarge(usize),
    /// The input ends inside an item.
    #[error("CBOR input ends inside an item at offset {0}")]
    Truncated(usize),
    /// Bytes follow the one top-level item.
    #[error("{0} trailing bytes after the CBOR item")]
    TrailingBytes(usize),
    /// Additional information 28-30, a reserved simple value, a break outside an indefinite item,
    /// or an indefinite-length string chunk of another type.
    #[error("malformed CBOR at offset {0}")]
    Malformed(usize),
    /// Arrays, maps and tags nested deeper than [`super::MAX_DEPTH`].
    #[error("CBOR nested deeper than {} levels", super::MAX_DEPTH)]
    TooDeep,
    /// A text string that is not UTF-8.
    #[error("CBOR text string at offset {0} is not UTF-8")]
    InvalidUtf8(usize),
    /// A negative integer below -2^63.
    #[error("CBOR integer at offset {0} is below the 64-bit range")]
    IntegerOutOfRange(usize),
    /// The document is well-formed CBOR but not what the format prescribes.
    #[error("invalid {format}: {reason}")]
    Invalid {
        /// `LwM2M CBOR` or `SenML CBOR`.
        format: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl CborError {
    pub(crate) fn lwm2m(reason: impl Into<String>) -> Self {
        Self::Invalid {
            format: "LwM2M CBOR",
            reason: reason.into(),
        }
    }

    pub(crate) fn senml(reason: impl Into<String>) -> Self {
        Self::Invalid {
            format: "SenML CBOR",
            reason: reason.into(),
        }
    }
}
