//! TLV run → tree, checking every length against its enclosing buffer and every child's kind
//! against its parent, so arbitrary bytes give a [`TlvError`] and never a panic.

use super::{Tlv, TlvBody, TlvError, TlvKind, MAX_INPUT_LEN};

/// Decode a run of TLVs (a whole CoAP payload).
///
/// Any kind may appear at top level: a read of `/O/I/R` on a multiple resource may answer with
/// bare Resource Instances. Recursion is bounded because the nesting rules allow at most two
/// levels (Object Instance → Multiple Resource → Resource Instance).
pub fn decode(data: &[u8]) -> Result<Vec<Tlv>, TlvError> {
    if data.len() > MAX_INPUT_LEN {
        return Err(TlvError::InputTooLarge(data.len()));
    }
    decode_run(data, 0, None)
}

/// One parsed header: where the value sits in the buffer being read.
struct Header {
    kind: TlvKind,
    id: u16,
    value_start: usize,
    value_len: usize,
}

/// Decode every TLV in `buf`; `base` is `buf`'s offset in the whole input (for error messages).
fn decode_run(buf: &[u8], base: usize, parent: Option<TlvKind>) -> Result<Vec<Tlv>, TlvError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let header = read_header(buf, pos, base)?;
        if let Some(parent) = parent {
            if !parent.may_contain(header.kind) {
                return Err(TlvError::BadNesting {
                    parent,
                    child: header.kind,
                });
            }
        }
        let end = header.value_start + header.value_len;
        let value = &buf[header.value_start..end];
        let body = match header.kind {
            TlvKind::ObjectInstance => TlvBody::ObjectInstance(decode_run(
                value,
                base + header.value_start,
                Some(header.kind),
            )?),
            TlvKind::MultipleResource => TlvBody::MultipleResource(decode_run(
                value,
                base + header.value_start,
                Some(header.kind),
            )?),
            TlvKind::ResourceInstance => TlvBody::ResourceInstance(value.to_vec()),
            TlvKind::Resource => TlvBody::Resource(value.to_vec()),
        };
        out.push(Tlv {
            id: header.id,
            body,
        });
        pos = end;
    }
    Ok(out)
}

/// Parse the header at `buf[pos]`: type byte, 8/16-bit identifier, inline or 8/16/24-bit length.
fn read_header(buf: &[u8], pos: usize, base: usize) -> Result<Header, TlvError> {
    let truncated = || TlvError::TruncatedHeader { offset: base + pos };
    let type_byte = *buf.get(pos).ok_or_else(truncated)?;
    let kind = TlvKind::from_bits(type_byte >> 6);
    let id_len = if type_byte & 0x20 != 0 { 2 } else { 1 };
    let length_len = usize::from((type_byte >> 3) & 0b11);
    let value_start = pos + 1 + id_len + length_len;
    let fields = buf.get(pos + 1..value_start).ok_or_else(truncated)?;
    let (id_bytes, length_bytes) = fields.split_at(id_len);
    let id = id_bytes
        .iter()
        .fold(0u16, |acc, &b| (acc << 8) | u16::from(b));
    // Spec §6: with an explicit length field, bits 2-0 are ignored.
    let value_len = if length_len == 0 {
        usize::from(type_byte & 0b111)
    } else {
        length_bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    let available = buf.len() - value_start;
    if value_len > available {
        return Err(TlvError::LengthPastEnd {
            offset: base + pos,
            length: value_len,
            available,
        });
    }
    Ok(Header {
        kind,
        id,
        value_start,
        value_len,
    })
}
