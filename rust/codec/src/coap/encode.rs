//! [`Message`] or loose parts → datagram, options sorted by number with the shortest
//! delta/length forms (RFC 7252 §3.1).

use super::{
    CoapError, Message, MessageType, MAX_MESSAGE_LEN, MAX_OPTION_EXTENDED, MAX_TOKEN_LEN,
    PAYLOAD_MARKER,
};

/// Encode a message; its options may be in any order.
pub fn encode(message: &Message) -> Result<Vec<u8>, CoapError> {
    let mut out = Vec::new();
    encode_into(message, &mut out)?;
    Ok(out)
}

/// Append the encoding of `message` to `out`; on error `out` is left unchanged.
pub fn encode_into(message: &Message, out: &mut Vec<u8>) -> Result<(), CoapError> {
    let mut options = option_refs(message);
    encode_parts_into(
        out,
        message.mtype,
        message.code,
        message.mid,
        &message.token,
        &mut options,
        &message.payload,
    )
}

/// The encoded size of `message`, after checking that it can be encoded.
pub fn encoded_len(message: &Message) -> Result<usize, CoapError> {
    check_token(
        message.code,
        &message.token,
        &message.options,
        &message.payload,
    )?;
    let mut options = option_refs(message);
    options.sort_by_key(|&(number, _)| number);
    parts_len(&message.token, &options, &message.payload)
}

/// Append a message given as parts, so callers need not build a [`Message`]. `options` is
/// sorted in place by number (stable: repeated options keep their order). On error `out` is
/// left unchanged.
pub fn encode_parts_into(
    out: &mut Vec<u8>,
    mtype: MessageType,
    code: u8,
    mid: u16,
    token: &[u8],
    options: &mut [(u16, &[u8])],
    payload: &[u8],
) -> Result<(), CoapError> {
    check_token(code, token, options, payload)?;
    options.sort_by_key(|&(number, _)| number);
    // Size (and check) everything first so a bad message writes nothing.
    out.reserve(parts_len(token, options, payload)?);

    out.push(0x40 | (mtype as u8) << 4 | token.len() as u8);
    out.push(code);
    out.extend_from_slice(&mid.to_be_bytes());
    out.extend_from_slice(token);
    let mut previous = 0u16;
    for &(number, value) in options.iter() {
        write_option_header(out, usize::from(number - previous), value.len());
        out.extend_from_slice(value);
        previous = number;
    }
    if !payload.is_empty() {
        out.push(PAYLOAD_MARKER);
        out.extend_from_slice(payload);
    }
    Ok(())
}

fn option_refs(message: &Message) -> Vec<(u16, &[u8])> {
    message
        .options
        .iter()
        .map(|option| (option.number, option.value.as_slice()))
        .collect()
}

/// Token length 0-8, and an Empty message (code 0.00) carries nothing (RFC 7252 §3, §4.1).
fn check_token<T>(code: u8, token: &[u8], options: &[T], payload: &[u8]) -> Result<(), CoapError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(CoapError::BadTokenLength(token.len()));
    }
    if code == 0 && !(token.is_empty() && options.is_empty() && payload.is_empty()) {
        return Err(CoapError::NonEmptyEmptyMessage);
    }
    Ok(())
}

/// Encoded size of sorted options plus header, token and payload, within the limits.
fn parts_len(token: &[u8], options: &[(u16, &[u8])], payload: &[u8]) -> Result<usize, CoapError> {
    let mut total = 4 + token.len();
    let mut previous = 0u16;
    for &(number, value) in options {
        if value.len() > MAX_OPTION_EXTENDED {
            return Err(CoapError::OptionTooLong(value.len()));
        }
        total += 1 + extension_len(usize::from(number - previous)) + extension_len(value.len());
        total += value.len();
        previous = number;
    }
    if !payload.is_empty() {
        total += 1 + payload.len();
    }
    if total > MAX_MESSAGE_LEN {
        return Err(CoapError::MessageTooLarge(total));
    }
    Ok(total)
}

/// Extension bytes after the nibble for a delta or length (RFC 7252 §3.1).
fn extension_len(value: usize) -> usize {
    match value {
        0..=12 => 0,
        13..=268 => 1,
        _ => 2,
    }
}

fn nibble(value: usize) -> u8 {
    match value {
        0..=12 => value as u8,
        13..=268 => 13,
        _ => 14,
    }
}

fn write_extension(out: &mut Vec<u8>, value: usize) {
    match value {
        0..=12 => {}
        13..=268 => out.push((value - 13) as u8),
        // parts_len bounded value to MAX_OPTION_EXTENDED, so this fits in two bytes.
        _ => out.extend_from_slice(&((value - 269) as u16).to_be_bytes()),
    }
}

fn write_option_header(out: &mut Vec<u8>, delta: usize, length: usize) {
    out.push(nibble(delta) << 4 | nibble(length));
    write_extension(out, delta);
    write_extension(out, length);
}
