//! Tree → TLV run with the shortest header for every node (Wakaama `prv_createHeader`).

use std::borrow::Borrow;

use super::{Tlv, TlvBody, TlvError, TlvKind, MAX_VALUE_LEN};

/// Encode a run of TLVs; fails on a nesting-rule violation or an over-long value.
///
/// Takes owned nodes or references (`&[Tlv]` or `&[&Tlv]`) so callers holding nodes in other
/// containers need not clone them into one slice.
pub fn encode<N: Borrow<Tlv>>(nodes: &[N]) -> Result<Vec<u8>, TlvError> {
    let mut out = Vec::new();
    encode_into(nodes, &mut out)?;
    Ok(out)
}

/// Append the encoding of `nodes` to `out`; on error `out` is left unchanged.
pub fn encode_into<N: Borrow<Tlv>>(nodes: &[N], out: &mut Vec<u8>) -> Result<(), TlvError> {
    // Validate and size the whole tree first so a bad tree writes nothing.
    let total = encoded_len(nodes)?;
    out.reserve(total);
    for node in nodes {
        write_node(node.borrow(), out)?;
    }
    Ok(())
}

/// The encoded size of a run, after checking the nesting rules and length limits.
pub fn encoded_len<N: Borrow<Tlv>>(nodes: &[N]) -> Result<usize, TlvError> {
    nodes
        .iter()
        .try_fold(0usize, |acc, node| Ok(acc + node_len(node.borrow())?))
}

/// Header plus value size of one node.
fn node_len(node: &Tlv) -> Result<usize, TlvError> {
    let value_len = value_len(node)?;
    Ok(header_len(node.id, value_len) + value_len)
}

/// Size of a node's value: its bytes for a leaf, its encoded children for a container.
fn value_len(node: &Tlv) -> Result<usize, TlvError> {
    let len = match &node.body {
        TlvBody::Resource(value) | TlvBody::ResourceInstance(value) => value.len(),
        TlvBody::ObjectInstance(children) | TlvBody::MultipleResource(children) => {
            let parent = node.kind();
            children.iter().try_fold(0usize, |acc, child| {
                if !parent.may_contain(child.kind()) {
                    return Err(TlvError::BadNesting {
                        parent,
                        child: child.kind(),
                    });
                }
                Ok(acc + node_len(child)?)
            })?
        }
    };
    if len > MAX_VALUE_LEN {
        return Err(TlvError::ValueTooLong(len));
    }
    Ok(len)
}

/// Bytes of the shortest header for `id` and `value_len` (2 to 6).
fn header_len(id: u16, value_len: usize) -> usize {
    let id_len = if id > 0xFF { 2 } else { 1 };
    1 + id_len + length_field_len(value_len)
}

/// Width of the explicit length field: none for 0-7 (inline in bits 2-0), else 1, 2 or 3 bytes.
fn length_field_len(value_len: usize) -> usize {
    match value_len {
        0..=7 => 0,
        8..=0xFF => 1,
        0x100..=0xFFFF => 2,
        _ => 3,
    }
}

fn write_node(node: &Tlv, out: &mut Vec<u8>) -> Result<(), TlvError> {
    let value_len = value_len(node)?;
    write_header(node.kind(), node.id, value_len, out);
    match &node.body {
        TlvBody::Resource(value) | TlvBody::ResourceInstance(value) => out.extend_from_slice(value),
        TlvBody::ObjectInstance(children) | TlvBody::MultipleResource(children) => {
            for child in children {
                write_node(child, out)?;
            }
        }
    }
    Ok(())
}

/// Type byte (kind bits 7-6, id width bit 5, length kind bits 4-3, inline length bits 2-0),
/// identifier, then the length field; `value_len` is at most [`MAX_VALUE_LEN`] here.
fn write_header(kind: TlvKind, id: u16, value_len: usize, out: &mut Vec<u8>) {
    let length_len = length_field_len(value_len);
    let mut type_byte = (kind as u8) << 6;
    if id > 0xFF {
        type_byte |= 0x20;
    }
    if length_len == 0 {
        type_byte |= value_len as u8;
    } else {
        type_byte |= (length_len as u8) << 3;
    }
    out.push(type_byte);
    if id > 0xFF {
        out.extend_from_slice(&id.to_be_bytes());
    } else {
        out.push(id as u8);
    }
    let length = (value_len as u32).to_be_bytes();
    out.extend_from_slice(&length[4 - length_len..]);
}
