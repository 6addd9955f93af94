//! Option numbers, the uint option codec and the checks on the options devicehub pre-parses.

use super::{Block, CoapError};

/// If-Match (RFC 7252 §5.10).
pub const IF_MATCH: u16 = 1;
/// Uri-Host (RFC 7252 §5.10).
pub const URI_HOST: u16 = 3;
/// ETag (RFC 7252 §5.10).
pub const ETAG: u16 = 4;
/// If-None-Match (RFC 7252 §5.10).
pub const IF_NONE_MATCH: u16 = 5;
/// Observe, uint 0-3 bytes (RFC 7641 §2).
pub const OBSERVE: u16 = 6;
/// Uri-Port (RFC 7252 §5.10).
pub const URI_PORT: u16 = 7;
/// Location-Path, one string per segment (RFC 7252 §5.10.7).
pub const LOCATION_PATH: u16 = 8;
/// Uri-Path, one string per segment (RFC 7252 §5.10.1).
pub const URI_PATH: u16 = 11;
/// Content-Format, uint 0-2 bytes (RFC 7252 §5.10.3).
pub const CONTENT_FORMAT: u16 = 12;
/// Max-Age (RFC 7252 §5.10.5).
pub const MAX_AGE: u16 = 14;
/// Uri-Query, one `key=value` string per option (RFC 7252 §5.10.1).
pub const URI_QUERY: u16 = 15;
/// Accept, uint 0-2 bytes (RFC 7252 §5.10.4).
pub const ACCEPT: u16 = 17;
/// Location-Query (RFC 7252 §5.10.7).
pub const LOCATION_QUERY: u16 = 20;
/// Block2, uint 0-3 bytes (RFC 7959 §2.1).
pub const BLOCK2: u16 = 23;
/// Block1, uint 0-3 bytes (RFC 7959 §2.1).
pub const BLOCK1: u16 = 27;
/// Size2 (RFC 7959 §4).
pub const SIZE2: u16 = 28;
/// Proxy-Uri (RFC 7252 §5.10.2).
pub const PROXY_URI: u16 = 35;
/// Proxy-Scheme (RFC 7252 §5.10.2).
pub const PROXY_SCHEME: u16 = 39;
/// Size1 (RFC 7252 §5.10.9).
pub const SIZE1: u16 = 60;

/// The critical options devicehub acts on (RFC 7252 §5.4.1): any other critical (odd-numbered)
/// option makes a CON request be answered 4.02 Bad Option and a response be rejected.
/// If-Match and If-None-Match are not implemented, so they are refused rather than silently
/// ignored; the proxy options are understood well enough to answer 5.05 (§5.7.2).
pub const RECOGNISED_CRITICAL: [u16; 9] = [
    URI_HOST,
    URI_PORT,
    URI_PATH,
    URI_QUERY,
    ACCEPT,
    BLOCK2,
    BLOCK1,
    PROXY_URI,
    PROXY_SCHEME,
];

/// Whether `number` is a critical option devicehub does not act on (RFC 7252 §5.4.6: odd
/// numbers are critical).
pub fn unrecognised_critical(number: u16) -> bool {
    number & 1 == 1 && !RECOGNISED_CRITICAL.contains(&number)
}

/// Read a big-endian uint option of at most `max` bytes; leading zero bytes are accepted
/// (RFC 7252 §3.2 only asks senders to be minimal).
pub fn read_uint(number: u16, value: &[u8], max: usize) -> Result<u32, CoapError> {
    if value.len() > max || value.len() > 4 {
        return Err(CoapError::UintTooLong {
            number,
            length: value.len(),
            max,
        });
    }
    Ok(value.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b)))
}

/// The shortest big-endian form of `value`: no leading zero bytes, so 0 is empty
/// (RFC 7252 §3.2).
pub fn encode_uint(value: u64) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let skip = (value.leading_zeros() / 8) as usize;
    bytes[skip..].to_vec()
}

/// Read a Block1/Block2 value: NUM in the high bits, then M, then SZX (RFC 7959 §2.2).
pub fn read_block(number: u16, value: &[u8]) -> Result<Block, CoapError> {
    let raw = read_uint(number, value, 3)?;
    let szx = (raw & 0x7) as u8;
    if szx == 7 {
        return Err(CoapError::ReservedBlockSize { number });
    }
    Ok(Block {
        num: raw >> 4,
        more: raw & 0x8 != 0,
        szx,
    })
}

/// Read a string option as UTF-8.
pub fn read_str(number: u16, value: &[u8]) -> Result<&str, CoapError> {
    std::str::from_utf8(value).map_err(|_| CoapError::InvalidUtf8 { number })
}

/// Check one option value if it is one of those [`super::Message`] pre-parses, so those
/// accessors never fail on a decoded message; every other option is left to the caller.
pub fn check(number: u16, value: &[u8]) -> Result<(), CoapError> {
    match number {
        URI_PATH | URI_QUERY | LOCATION_PATH => read_str(number, value).map(drop),
        OBSERVE => read_uint(number, value, 3).map(drop),
        CONTENT_FORMAT | ACCEPT => read_uint(number, value, 2).map(drop),
        BLOCK1 | BLOCK2 => read_block(number, value).map(drop),
        _ => Ok(()),
    }
}
