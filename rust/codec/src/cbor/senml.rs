//! SenML CBOR (Content-Format 112, RFC 8428 §6; LwM2M Core 1.1 §7.4.5): an array of records,
//! each a map with integer labels (bn −2, bt −3, bv −5, n 0, v 2, vs 3, vb 4, vd 8, …) plus
//! LwM2M's text label `vlo` (object link). Decoding resolves the base fields (RFC 8428 §4.5):
//! the name is bn + n and a number is bv + v; times are dropped, so callers keep the last
//! record of a name.

use super::item::{self, Item};
use super::{CborError, Value};

const BVER: i64 = -1;
const BN: i64 = -2;
const BV: i64 = -5;
const N: u64 = 0;
const V: u64 = 2;
const VS: u64 = 3;
const VB: u64 = 4;
const VD: u64 = 8;
const VLO: &str = "vlo";

/// Decode records into resolved `(name, value)` entries; records without a value are skipped.
///
/// Errors: malformed CBOR, a top level that is not an array of maps, a field of the wrong
/// type, a record with two values, a `bver` above 10, or a text label ending in `_`
/// (must-understand, RFC 8428 §4.4).
pub fn decode(data: &[u8]) -> Result<Vec<(String, Value)>, CborError> {
    let Item::Array(records) = item::decode(data)? else {
        return Err(CborError::senml("the top level is not an array"));
    };
    let mut out = Vec::with_capacity(records.len());
    let mut base_name = String::new();
    let mut base_value: Option<Value> = None;
    for record in &records {
        let Item::Map(fields) = record else {
            return Err(CborError::senml("a record is not a map"));
        };
        let mut name: Option<&str> = None;
        let mut value: Option<Value> = None;
        for (label, field) in fields {
            let set = |slot: &mut Option<Value>, v: Value| {
                if slot.replace(v).is_some() {
                    Err(CborError::senml("a record holds two values"))
                } else {
                    Ok(())
                }
            };
            match label {
                Item::Neg(BN) => base_name = text(field, "bn")?.to_owned(),
                Item::Neg(BV) => base_value = Some(number(field, "bv")?),
                Item::Neg(BVER) if !matches!(field, Item::Uint(v) if *v <= 10) => {
                    return Err(CborError::senml("unsupported bver"));
                }
                Item::Uint(N) => name = Some(text(field, "n")?),
                Item::Uint(V) => set(&mut value, number(field, "v")?)?,
                Item::Uint(VS) => set(&mut value, Value::Text(text(field, "vs")?.to_owned()))?,
                Item::Uint(VB) => match field {
                    Item::Bool(b) => set(&mut value, Value::Bool(*b))?,
                    _ => return Err(CborError::senml("vb is not a boolean")),
                },
                Item::Uint(VD) => match field {
                    Item::Bytes(b) => set(&mut value, Value::Bytes(b.clone()))?,
                    _ => return Err(CborError::senml("vd is not a byte string")),
                },
                Item::Text(l) if l == VLO => {
                    set(&mut value, Value::ObjLnk(text(field, "vlo")?.to_owned()))?
                }
                Item::Text(l) if l.ends_with('_') => {
                    return Err(CborError::senml(format!("must-understand label {l:?}")))
                }
                _ => {} // bt, bu, bs, u, s, t, ut and unknown labels carry no resource value
            }
        }
        let Some(value) = value else { continue };
        let value = match (&base_value, value) {
            (Some(base), number @ (Value::Int(_) | Value::Uint(_) | Value::Float(_))) => {
                add(base, &number)
            }
            (_, other) => other,
        };
        out.push((format!("{base_name}{}", name.unwrap_or_default()), value));
    }
    Ok(out)
}

/// Encode entries as records: the first carries `bn` when `base_name` is not empty, each its
/// `n` (relative to `base_name`) and one value field chosen by the value's type.
pub fn encode(entries: &[(String, Value)], base_name: &str) -> Vec<u8> {
    let records = entries
        .iter()
        .enumerate()
        .map(|(i, (name, value))| {
            let mut fields = Vec::with_capacity(3);
            if i == 0 && !base_name.is_empty() {
                fields.push((Item::Neg(BN), Item::Text(base_name.to_owned())));
            }
            if !name.is_empty() {
                fields.push((Item::Uint(N), Item::Text(name.clone())));
            }
            fields.push(match value {
                Value::Int(i) if *i >= 0 => (Item::Uint(V), Item::Uint(i.unsigned_abs())),
                Value::Int(i) => (Item::Uint(V), Item::Neg(*i)),
                Value::Uint(u) => (Item::Uint(V), Item::Uint(*u)),
                Value::Float(f) => (Item::Uint(V), Item::Float(*f)),
                Value::Text(s) => (Item::Uint(VS), Item::Text(s.clone())),
                Value::Bool(b) => (Item::Uint(VB), Item::Bool(*b)),
                Value::Bytes(b) => (Item::Uint(VD), Item::Bytes(b.clone())),
                Value::ObjLnk(s) => (Item::Text(VLO.to_owned()), Item::Text(s.clone())),
            });
            Item::Map(fields)
        })
        .collect();
    item::encode(&Item::Array(records))
}

fn text<'a>(item: &'a Item, label: &str) -> Result<&'a str, CborError> {
    match item {
        Item::Text(s) => Ok(s),
        _ => Err(CborError::senml(format!("{label} is not a text string"))),
    }
}

fn number(item: &Item, label: &str) -> Result<Value, CborError> {
    match item {
        Item::Uint(n) => Ok(i64::try_from(*n).map_or(Value::Uint(*n), Value::Int)),
        Item::Neg(i) => Ok(Value::Int(*i)),
        Item::Float(f) => Ok(Value::Float(*f)),
        _ => Err(CborError::senml(format!("{label} is not a number"))),
    }
}

fn as_f64(value: &Value) -> f64 {
    match value {
        Value::Int(i) => *i as f64,
        Value::Uint(u) => *u as f64,
        Value::Float(f) => *f,
        _ => 0.0,
    }
}

/// bv + v: exact when both are integers and the sum fits, else a float.
fn add(base: &Value, value: &Value) -> Value {
    match (base, value) {
        (Value::Int(a), Value::Int(b)) => a
            .checked_add(*b)
            .map_or(Value::Float(*a as f64 + *b as f64), Value::Int),
        _ => Value::Float(as_f64(base) + as_f64(value)),
    }
}
