//! The two CBOR content formats of LwM2M 1.1/1.2: SenML CBOR (112, RFC 8428 §6 with the LwM2M
//! `vlo` label, Core 1.1 §7.4.5) and LwM2M CBOR (11544, Transport 1.2 §7.4.6).
//!
//! Both sit on [`item`], a small generic CBOR (RFC 8949) reader and writer that bounds the input
//! size and the nesting depth, so arbitrary bytes give a [`CborError`] and never a panic.
//!
//! - [`lwm2m`]: nested maps keyed by path ids (or id arrays) ↔ `(path, value)` entries.
//! - [`senml`]: SenML record arrays ↔ `(name, value)` entries, base name and value resolved.
//! - [`Value`]: one resource value as the typed formats carry it.

mod error;
pub mod item;
pub mod lwm2m;
pub mod senml;
mod value;

#[cfg(test)]
mod tests;

pub use error::CborError;
pub use value::Value;

/// Largest input either decoder accepts: 16 MiB, as for TLV; it bounds the work one payload causes.
pub const MAX_INPUT_LEN: usize = 16 * 1024 * 1024;

/// Deepest nesting of arrays, maps and tags the item reader follows. SenML needs 2 (array →
/// map), LwM2M CBOR at most 6 (four levels of maps, an id array as a key, a time tag).
pub const MAX_DEPTH: usize = 8;
