//! Typed values inside Resource / Resource Instance TLVs (spec §6 "Values"), big-endian.
//!
//! Encoders pick the shortest form; decoders accept every form a client may send.

use super::TlvError;

/// Two's-complement integer in the shortest of 1, 2, 4 or 8 bytes.
pub fn encode_int(value: i64) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let width = if i8::try_from(value).is_ok() {
        1
    } else if i16::try_from(value).is_ok() {
        2
    } else if i32::try_from(value).is_ok() {
        4
    } else {
        8
    };
    bytes[8 - width..].to_vec()
}

/// Read a 1, 2, 4 or 8-byte two's-complement integer (Wakaama sends 8 bytes for its clock).
pub fn read_int(data: &[u8]) -> Result<i64, TlvError> {
    Ok(match *data {
        [a] => i64::from(i8::from_be_bytes([a])),
        [a, b] => i64::from(i16::from_be_bytes([a, b])),
        [a, b, c, d] => i64::from(i32::from_be_bytes([a, b, c, d])),
        [a, b, c, d, e, f, g, h] => i64::from_be_bytes([a, b, c, d, e, f, g, h]),
        _ => return Err(TlvError::BadIntegerLength(data.len())),
    })
}

/// Time is Unix seconds with the integer encoding (Anjay sends 4 bytes, e.g. `6b036a58`).
pub fn encode_time(unix_seconds: i64) -> Vec<u8> {
    encode_int(unix_seconds)
}

/// Read a Time value: any integer width.
pub fn read_time(data: &[u8]) -> Result<i64, TlvError> {
    read_int(data)
}

/// LwM2M 1.1 unsigned integer in the shortest of 1, 2, 4 or 8 bytes.
pub fn encode_unsigned(value: u64) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let width = if value <= 0xFF {
        1
    } else if value <= 0xFFFF {
        2
    } else if value <= 0xFFFF_FFFF {
        4
    } else {
        8
    };
    bytes[8 - width..].to_vec()
}

/// Read a 1, 2, 4 or 8-byte unsigned integer.
pub fn read_unsigned(data: &[u8]) -> Result<u64, TlvError> {
    match data.len() {
        1 | 2 | 4 | 8 => Ok(data.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))),
        n => Err(TlvError::BadIntegerLength(n)),
    }
}

/// IEEE-754 binary32 when the value survives the round trip exactly (Wakaama does the same),
/// else binary64. NaN goes as binary32 NaN: its payload carries no meaning here.
pub fn encode_float(value: f64) -> Vec<u8> {
    let narrow = value as f32;
    if f64::from(narrow) == value || value.is_nan() {
        narrow.to_be_bytes().to_vec()
    } else {
        value.to_be_bytes().to_vec()
    }
}

/// Read a 4- or 8-byte IEEE-754 float.
pub fn read_float(data: &[u8]) -> Result<f64, TlvError> {
    Ok(match *data {
        [a, b, c, d] => f64::from(f32::from_be_bytes([a, b, c, d])),
        [a, b, c, d, e, f, g, h] => f64::from_be_bytes([a, b, c, d, e, f, g, h]),
        _ => return Err(TlvError::BadFloatLength(data.len())),
    })
}

/// One byte, 0 or 1.
pub fn encode_bool(value: bool) -> Vec<u8> {
    vec![u8::from(value)]
}

/// Read a boolean: exactly one byte, 0 or 1.
pub fn read_bool(data: &[u8]) -> Result<bool, TlvError> {
    match *data {
        [0] => Ok(false),
        [1] => Ok(true),
        [other] => Err(TlvError::BadBooleanValue(other)),
        _ => Err(TlvError::BadBooleanLength(data.len())),
    }
}

/// Read a string (or 1.1 core link): UTF-8, no terminator, empty allowed.
pub fn read_string(data: &[u8]) -> Result<&str, TlvError> {
    std::str::from_utf8(data).map_err(|e| TlvError::InvalidUtf8 {
        valid_up_to: e.valid_up_to(),
    })
}

/// Object ID then Object Instance ID, each u16: `/3/0` → `00 03 00 00`.
pub fn encode_objlnk(object_id: u16, instance_id: u16) -> [u8; 4] {
    let [a, b] = object_id.to_be_bytes();
    let [c, d] = instance_id.to_be_bytes();
    [a, b, c, d]
}

/// Read an objlnk: exactly 4 bytes.
pub fn read_objlnk(data: &[u8]) -> Result<(u16, u16), TlvError> {
    match *data {
        [a, b, c, d] => Ok((u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]))),
        _ => Err(TlvError::BadObjlnkLength(data.len())),
    }
}
