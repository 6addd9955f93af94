//! Datagram → [`Message`], checking every RFC 7252 §3 format rule; never panics.

use super::{
    options, CoapError, CoapOption, Message, MessageType, MAX_MESSAGE_LEN, MAX_TOKEN_LEN,
    PAYLOAD_MARKER,
};

/// Decode one datagram. Besides the message format (RFC 7252 §3, §3.1) it checks the values
/// of the options [`Message`] pre-parses (see [`options::check`]), so those accessors cannot
/// fail on the result.
pub fn decode(data: &[u8]) -> Result<Message, CoapError> {
    if data.len() > MAX_MESSAGE_LEN {
        return Err(CoapError::MessageTooLarge(data.len()));
    }
    let &[first, code, mid_hi, mid_lo, ref rest @ ..] = data else {
        return Err(CoapError::TruncatedHeader(data.len()));
    };
    let version = first >> 6;
    if version != 1 {
        return Err(CoapError::BadVersion(version));
    }
    let token_len = usize::from(first & 0x0F);
    if token_len > MAX_TOKEN_LEN {
        return Err(CoapError::BadTokenLength(token_len));
    }
    // RFC 7252 §4.1: an Empty message is exactly the 4-byte header with token length 0.
    if code == 0 && (token_len != 0 || !rest.is_empty()) {
        return Err(CoapError::NonEmptyEmptyMessage);
    }
    let token = rest
        .get(..token_len)
        .ok_or(CoapError::TruncatedToken { length: token_len })?;

    let mut pos = 4 + token_len;
    let mut number = 0u32;
    let mut options = Vec::new();
    let mut payload: &[u8] = &[];
    while let Some(&byte) = data.get(pos) {
        let start = pos;
        if byte == PAYLOAD_MARKER {
            payload = &data[pos + 1..];
            if payload.is_empty() {
                return Err(CoapError::EmptyPayload);
            }
            break;
        }
        pos += 1;
        let delta = extended(byte >> 4, data, &mut pos, start)?;
        let length = extended(byte & 0x0F, data, &mut pos, start)?;
        number += delta as u32;
        let number = u16::try_from(number).map_err(|_| CoapError::OptionNumberTooLarge(number))?;
        let value = data
            .get(pos..pos + length)
            .ok_or(CoapError::TruncatedOption { offset: start })?;
        pos += length;
        options::check(number, value)?;
        options.push(CoapOption::new(number, value));
    }

    Ok(Message {
        mtype: MessageType::from_bits(first >> 4),
        code,
        mid: u16::from_be_bytes([mid_hi, mid_lo]),
        token: token.to_vec(),
        options,
        payload: payload.to_vec(),
    })
}

/// Resolve a delta or length nibble, reading its extension bytes at `pos` (RFC 7252 §3.1):
/// 13 → one byte + 13, 14 → two bytes + 269, 15 → reserved.
fn extended(nibble: u8, data: &[u8], pos: &mut usize, start: usize) -> Result<usize, CoapError> {
    let truncated = CoapError::TruncatedOption { offset: start };
    match nibble {
        0..=12 => Ok(usize::from(nibble)),
        13 => {
            let byte = *data.get(*pos).ok_or(truncated)?;
            *pos += 1;
            Ok(usize::from(byte) + 13)
        }
        14 => {
            let pair = data.get(*pos..*pos + 2).ok_or(truncated)?;
            *pos += 2;
            Ok(usize::from(u16::from_be_bytes([pair[0], pair[1]])) + 269)
        }
        _ => Err(CoapError::ReservedNibble { offset: start }),
    }
}
