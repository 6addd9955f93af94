//! LwM2M CBOR (Content-Format 11544, Transport 1.2 §7.4.6): one map whose keys are path ids
//! (an unsigned integer, or an array of them standing for several levels) and whose values are
//! nested maps or resource values. `{3: {0: {0: "Open Mobile Alliance"}}}` and
//! `{[3, 0]: {0: "Open Mobile Alliance"}}` both give `/3/0/0`. Paths are absolute.

use super::item::{self, Item};
use super::{CborError, Value};

/// Most ids in a path: `/O/I/R/RI`.
pub const MAX_PATH_LEN: usize = 4;

/// A path: object, instance, resource, resource instance ids (1 to 4 of them).
pub type Path = Vec<u16>;

/// Decode a document into `(path, value)` entries in document order.
///
/// Errors: malformed CBOR, a top level that is not a map, a key that is not an id (0-65534) or
/// a non-empty id array, a path deeper than four ids, a value that is not a resource value
/// (array, null, undefined, a tag other than 1), or one path given twice or under another.
pub fn decode(data: &[u8]) -> Result<Vec<(Path, Value)>, CborError> {
    let Item::Map(pairs) = item::decode(data)? else {
        return Err(CborError::lwm2m("the top level is not a map"));
    };
    let mut out = Vec::new();
    walk(&pairs, &mut Vec::with_capacity(MAX_PATH_LEN), &mut out)?;
    check_paths(out.iter().map(|(p, _)| p.as_slice()))?;
    Ok(out)
}

/// Encode entries as nested maps keyed by single ids, in path order.
///
/// Errors: an empty path, one deeper than four ids or holding the reserved id 65535, or one
/// path given twice or under another. [`Value::ObjLnk`] goes as its `"oid:iid"` text.
pub fn encode(entries: &[(Path, Value)]) -> Result<Vec<u8>, CborError> {
    let mut sorted: Vec<(&[u16], &Value)> =
        entries.iter().map(|(p, v)| (p.as_slice(), v)).collect();
    for (path, _) in &sorted {
        if path.is_empty() || path.len() > MAX_PATH_LEN || path.contains(&u16::MAX) {
            return Err(CborError::lwm2m(format!("cannot encode path {path:?}")));
        }
    }
    check_paths(sorted.iter().map(|(p, _)| *p))?;
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    Ok(item::encode(&nest(&sorted)))
}

/// Entries sorted by path, none a prefix of another, paths non-empty → one map level.
fn nest(entries: &[(&[u16], &Value)]) -> Item {
    let mut pairs = Vec::new();
    let mut rest = entries;
    while let Some(((first, value), _)) = rest.split_first() {
        let id = first[0];
        let count = rest.iter().take_while(|(p, _)| p[0] == id).count();
        let (group, tail) = rest.split_at(count);
        let content = if first.len() == 1 {
            value_item(value) // prefix-free: a one-id path is alone in its group
        } else {
            let below: Vec<_> = group.iter().map(|(p, v)| (&p[1..], *v)).collect();
            nest(&below)
        };
        pairs.push((Item::Uint(u64::from(id)), content));
        rest = tail;
    }
    Item::Map(pairs)
}

fn value_item(value: &Value) -> Item {
    match value {
        Value::Int(i) if *i >= 0 => Item::Uint(i.unsigned_abs()),
        Value::Int(i) => Item::Neg(*i),
        Value::Uint(u) => Item::Uint(*u),
        Value::Float(f) => Item::Float(*f),
        Value::Bool(b) => Item::Bool(*b),
        Value::Text(s) | Value::ObjLnk(s) => Item::Text(s.clone()),
        Value::Bytes(b) => Item::Bytes(b.clone()),
    }
}

fn walk(
    pairs: &[(Item, Item)],
    path: &mut Path,
    out: &mut Vec<(Path, Value)>,
) -> Result<(), CborError> {
    for (key, value) in pairs {
        let depth = path.len();
        push_key(key, path)?;
        match value {
            Item::Map(inner) => walk(inner, path, out)?,
            Item::Null => {} // a composite write's "remove"; it carries no value to report
            leaf => out.push((path.clone(), leaf_value(leaf, path)?)),
        }
        path.truncate(depth);
    }
    Ok(())
}

fn push_key(key: &Item, path: &mut Path) -> Result<(), CborError> {
    let ids: &[Item] = match key {
        Item::Array(ids) if !ids.is_empty() => ids,
        Item::Uint(_) => std::slice::from_ref(key),
        _ => {
            return Err(CborError::lwm2m(format!(
                "key {key:?} under {path:?} is not a path id"
            )))
        }
    };
    for id in ids {
        if path.len() == MAX_PATH_LEN {
            return Err(CborError::lwm2m("a path is deeper than /O/I/R/RI"));
        }
        match id {
            Item::Uint(n) if *n < u64::from(u16::MAX) => path.push(*n as u16),
            other => {
                return Err(CborError::lwm2m(format!(
                    "{other:?} is not a path id (0-65534)"
                )))
            }
        }
    }
    Ok(())
}

/// A resource value; a Time is tag 1 over integer (or float) seconds, and a decimal fraction
/// (tag 4, `[exponent, mantissa]`, RFC 8949 §3.4.4) a float, as Anjay accepts.
fn leaf_value(item: &Item, path: &[u16]) -> Result<Value, CborError> {
    Ok(match item {
        Item::Uint(n) => i64::try_from(*n).map_or(Value::Uint(*n), Value::Int),
        Item::Neg(i) => Value::Int(*i),
        Item::Float(f) => Value::Float(*f),
        Item::Bool(b) => Value::Bool(*b),
        Item::Text(s) => Value::Text(s.clone()),
        Item::Bytes(b) => Value::Bytes(b.clone()),
        Item::Tag(1, seconds) => match **seconds {
            Item::Uint(n) => {
                Value::Int(i64::try_from(n).map_err(|_| CborError::lwm2m("time out of range"))?)
            }
            Item::Neg(i) => Value::Int(i),
            Item::Float(f) if f.is_finite() && f.abs() < 9.2e18 => Value::Int(f.floor() as i64),
            _ => return Err(CborError::lwm2m(format!("tag 1 at {path:?} is not a time"))),
        },
        Item::Tag(4, fraction) => match &**fraction {
            Item::Array(parts) => match parts.as_slice() {
                [exponent, mantissa] => match (integer(exponent), integer(mantissa)) {
                    (Some(e), Some(m)) if (-400..=400).contains(&e) => {
                        Value::Float(decimal(m, e as i32))
                    }
                    _ => {
                        return Err(CborError::lwm2m(format!(
                            "bad decimal fraction at {path:?}"
                        )))
                    }
                },
                _ => {
                    return Err(CborError::lwm2m(format!(
                        "bad decimal fraction at {path:?}"
                    )))
                }
            },
            _ => {
                return Err(CborError::lwm2m(format!(
                    "bad decimal fraction at {path:?}"
                )))
            }
        },
        other => {
            return Err(CborError::lwm2m(format!(
                "{other:?} at {path:?} is not a resource value"
            )))
        }
    })
}

/// m × 10^e, dividing for negative exponents so `[-1, 45]` is exactly 4.5.
fn decimal(mantissa: i64, exponent: i32) -> f64 {
    if exponent < 0 {
        mantissa as f64 / 10f64.powi(-exponent)
    } else {
        mantissa as f64 * 10f64.powi(exponent)
    }
}

fn integer(item: &Item) -> Option<i64> {
    match item {
        Item::Uint(n) => i64::try_from(*n).ok(),
        Item::Neg(i) => Some(*i),
        _ => None,
    }
}

/// No path may be given twice or sit under another (a value and a map at once).
fn check_paths<'a>(paths: impl Iterator<Item = &'a [u16]>) -> Result<(), CborError> {
    let mut sorted: Vec<&[u16]> = paths.collect();
    sorted.sort_unstable();
    for pair in sorted.windows(2) {
        if pair[1].starts_with(pair[0]) {
            return Err(CborError::lwm2m(format!(
                "path {:?} is given twice or holds {:?}",
                pair[0], pair[1]
            )));
        }
    }
    Ok(())
}
