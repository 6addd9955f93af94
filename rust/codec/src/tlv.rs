//! The OMA-TLV codec (LwM2M 1.0 §6.4.3, 1.1 Core §7.4.3; lwm2m-device-side.md §6).
//!
//! A TLV run decodes to a typed tree of [`Tlv`] nodes and encodes back with the shortest header
//! (Wakaama `prv_createHeader`). TLV carries no types, so values stay raw bytes; the helpers in
//! [`value`] convert them once the caller knows the resource type.
//!
//! - [`decode`] / [`encode`]: the tree codec, with the nesting rules checked both ways.
//! - [`value`]: integer/time, unsigned, float, boolean, string, objlnk value codecs.
//! - [`TlvError`]: every way an input can be malformed or a tree unencodable.

mod decode;
mod encode;
mod error;
mod tree;
pub mod value;

#[cfg(test)]
mod tests;

pub use decode::decode;
pub use encode::{encode, encode_into, encoded_len};
pub use error::TlvError;
pub use tree::{Tlv, TlvBody, TlvKind};

/// Largest value length a TLV header can state: the 24-bit length field (spec §6).
pub const MAX_VALUE_LEN: usize = 0xFF_FFFF;

/// Largest input `decode` accepts: 16 MiB. It bounds the work one hostile payload can cause;
/// a single TLV with the maximal 24-bit length plus its header is just over it and is refused.
pub const MAX_INPUT_LEN: usize = 16 * 1024 * 1024;
