//! One resource value as the typed formats carry it.

/// A resource value. Integers decode to [`Value::Int`] when they fit in an `i64` and to
/// [`Value::Uint`] only above `i64::MAX` (LwM2M 1.1 unsigned integers); the encoders take both.
/// A Time (tag 1) decodes to its integer seconds; an objlnk is text `"3:0"` in LwM2M CBOR
/// (Transport 1.2 §7.4.6) and [`Value::ObjLnk`] only where SenML marks it with `vlo`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A signed integer or a Time in Unix seconds.
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    Uint(u64),
    /// A float (half, single and double precision all decode to `f64`).
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string (or, in LwM2M CBOR, an objlnk `"oid:iid"` or a core link).
    Text(String),
    /// Opaque bytes.
    Bytes(Vec<u8>),
    /// A SenML `vlo` object link, `"oid:iid"`.
    ObjLnk(String),
}
