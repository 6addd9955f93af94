//! A generic CBOR data item (RFC 8949 §3) and its bounded reader and shortest-form writer.
//!
//! The reader takes definite and indefinite lengths, half/single/double floats and tags; every
//! length is checked against the bytes left before anything is allocated, and nesting stops at
//! [`MAX_DEPTH`], so a hostile payload costs at most linear work.

use super::{CborError, MAX_DEPTH, MAX_INPUT_LEN};

/// One decoded CBOR data item.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// Major type 0.
    Uint(u64),
    /// Major type 1, already as its value `-1 - n` (only `n ≤ i64::MAX` is accepted).
    Neg(i64),
    /// Major type 2 (indefinite-length chunks joined).
    Bytes(Vec<u8>),
    /// Major type 3 (indefinite-length chunks joined).
    Text(String),
    /// Major type 4.
    Array(Vec<Item>),
    /// Major type 5, pairs in document order.
    Map(Vec<(Item, Item)>),
    /// Major type 6: a tag number and its content.
    Tag(u64, Box<Item>),
    /// `false` / `true`.
    Bool(bool),
    /// `null`.
    Null,
    /// `undefined`.
    Undefined,
    /// A half, single or double float.
    Float(f64),
    /// Any other simple value.
    Simple(u8),
}

/// Decode exactly one item filling `data`.
pub fn decode(data: &[u8]) -> Result<Item, CborError> {
    if data.len() > MAX_INPUT_LEN {
        return Err(CborError::InputTooLarge(data.len()));
    }
    let mut reader = Reader { data, pos: 0 };
    let item = reader.item(0)?;
    match data.len() - reader.pos {
        0 => Ok(item),
        extra => Err(CborError::TrailingBytes(extra)),
    }
}

/// Encode `item` with the shortest heads; floats as single precision when exact, else double.
pub fn encode(item: &Item) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(item, &mut out);
    out
}

/// Append the encoding of `item` to `out`.
pub fn encode_into(item: &Item, out: &mut Vec<u8>) {
    match item {
        Item::Uint(n) => head(0, *n, out),
        // -1 - v for v < 0 is in 0..=i64::MAX, so the cast cannot wrap.
        Item::Neg(v) => head(1, (-1 - *v) as u64, out),
        Item::Bytes(b) => {
            head(2, b.len() as u64, out);
            out.extend_from_slice(b);
        }
        Item::Text(s) => {
            head(3, s.len() as u64, out);
            out.extend_from_slice(s.as_bytes());
        }
        Item::Array(items) => {
            head(4, items.len() as u64, out);
            items.iter().for_each(|i| encode_into(i, out));
        }
        Item::Map(pairs) => {
            head(5, pairs.len() as u64, out);
            for (k, v) in pairs {
                encode_into(k, out);
                encode_into(v, out);
            }
        }
        Item::Tag(tag, content) => {
            head(6, *tag, out);
            encode_into(content, out);
        }
        Item::Bool(b) => out.push(if *b { 0xf5 } else { 0xf4 }),
        Item::Null => out.push(0xf6),
        Item::Undefined => out.push(0xf7),
        Item::Float(f) => {
            let narrow = *f as f32;
            if f64::from(narrow) == *f || f.is_nan() {
                out.push(0xfa);
                out.extend_from_slice(&narrow.to_be_bytes());
            } else {
                out.push(0xfb);
                out.extend_from_slice(&f.to_be_bytes());
            }
        }
        Item::Simple(v) if *v < 24 => out.push(0xe0 | v),
        Item::Simple(v) => out.extend_from_slice(&[0xf8, *v]),
    }
}

/// A major type and its argument in the shortest form (RFC 8949 §4.2.1).
fn head(major: u8, n: u64, out: &mut Vec<u8>) {
    let m = major << 5;
    if n < 24 {
        out.push(m | n as u8);
    } else if let Ok(b) = u8::try_from(n) {
        out.extend_from_slice(&[m | 24, b]);
    } else if let Ok(s) = u16::try_from(n) {
        out.push(m | 25);
        out.extend_from_slice(&s.to_be_bytes());
    } else if let Ok(w) = u32::try_from(n) {
        out.push(m | 26);
        out.extend_from_slice(&w.to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

const BREAK: u8 = 0xff;

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, CborError> {
        let b = *self
            .data
            .get(self.pos)
            .ok_or(CborError::Truncated(self.pos))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], CborError> {
        let left = self.data.len() - self.pos;
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n <= left)
            .ok_or(CborError::Truncated(self.pos))?;
        let slice = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    fn at_break(&mut self) -> Result<bool, CborError> {
        match self.data.get(self.pos) {
            Some(&BREAK) => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err(CborError::Truncated(self.pos)),
        }
    }

    /// The argument of a head; `None` for an indefinite length (additional information 31).
    fn argument(&mut self, info: u8, start: usize) -> Result<Option<u64>, CborError> {
        Ok(Some(match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.byte()?),
            25 => u64::from(u16::from_be_bytes(self.fixed()?)),
            26 => u64::from(u32::from_be_bytes(self.fixed()?)),
            27 => u64::from_be_bytes(self.fixed()?),
            31 => return Ok(None),
            _ => return Err(CborError::Malformed(start)),
        }))
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], CborError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N as u64)?);
        Ok(out)
    }

    fn item(&mut self, depth: usize) -> Result<Item, CborError> {
        let start = self.pos;
        let initial = self.byte()?;
        let (major, info) = (initial >> 5, initial & 0x1f);
        if major == 7 {
            return self.simple(info, start);
        }
        let arg = self.argument(info, start)?;
        let nested = || {
            if depth >= MAX_DEPTH {
                Err(CborError::TooDeep)
            } else {
                Ok(depth + 1)
            }
        };
        Ok(match (major, arg) {
            (0, Some(n)) => Item::Uint(n),
            (1, Some(n)) => Item::Neg(
                i64::try_from(n)
                    .map(|n| -1 - n)
                    .map_err(|_| CborError::IntegerOutOfRange(start))?,
            ),
            (2, _) => Item::Bytes(self.string(2, arg)?),
            (3, _) => {
                let bytes = self.string(3, arg)?;
                Item::Text(String::from_utf8(bytes).map_err(|_| CborError::InvalidUtf8(start))?)
            }
            (4, _) => {
                let inner = nested()?;
                let mut items = Vec::with_capacity(self.capacity(arg));
                match arg {
                    Some(n) => {
                        for _ in 0..n {
                            items.push(self.item(inner)?);
                        }
                    }
                    None => {
                        while !self.at_break()? {
                            items.push(self.item(inner)?);
                        }
                    }
                }
                Item::Array(items)
            }
            (5, _) => {
                let inner = nested()?;
                let mut pairs = Vec::with_capacity(self.capacity(arg) / 2);
                match arg {
                    Some(n) => {
                        for _ in 0..n {
                            pairs.push((self.item(inner)?, self.item(inner)?));
                        }
                    }
                    None => {
                        while !self.at_break()? {
                            pairs.push((self.item(inner)?, self.item(inner)?));
                        }
                    }
                }
                Item::Map(pairs)
            }
            (6, Some(tag)) => Item::Tag(tag, Box::new(self.item(nested()?)?)),
            _ => return Err(CborError::Malformed(start)),
        })
    }

    /// Room to reserve for a container: never more elements than bytes left (each takes ≥ 1).
    fn capacity(&self, arg: Option<u64>) -> usize {
        let left = self.data.len() - self.pos;
        arg.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX).min(left))
    }

    /// A byte or text string's content; indefinite strings are definite chunks of the same type.
    fn string(&mut self, major: u8, arg: Option<u64>) -> Result<Vec<u8>, CborError> {
        if let Some(n) = arg {
            return Ok(self.take(n)?.to_vec());
        }
        let mut out = Vec::new();
        while !self.at_break()? {
            let chunk_start = self.pos;
            let initial = self.byte()?;
            if initial >> 5 != major {
                return Err(CborError::Malformed(chunk_start));
            }
            match self.argument(initial & 0x1f, chunk_start)? {
                Some(n) => out.extend_from_slice(self.take(n)?),
                None => return Err(CborError::Malformed(chunk_start)),
            }
        }
        Ok(out)
    }

    fn simple(&mut self, info: u8, start: usize) -> Result<Item, CborError> {
        Ok(match info {
            20 => Item::Bool(false),
            21 => Item::Bool(true),
            22 => Item::Null,
            23 => Item::Undefined,
            0..=19 => Item::Simple(info),
            24 => match self.byte()? {
                v @ 32.. => Item::Simple(v),
                _ => return Err(CborError::Malformed(start)), // RFC 8949 §3.3: not well-formed
            },
            25 => Item::Float(half_to_f64(u16::from_be_bytes(self.fixed()?))),
            26 => Item::Float(f64::from(f32::from_be_bytes(self.fixed()?))),
            27 => Item::Float(f64::from_be_bytes(self.fixed()?)),
            _ => return Err(CborError::Malformed(start)), // 28-30 reserved, 31 a stray break
        })
    }
}

/// IEEE 754 binary16 → f64 (RFC 8949 Appendix D).
fn half_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 == 0 { 1.0 } else { -1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let mantissa = f64::from(bits & 0x3ff);
    sign * match exponent {
        0 => mantissa * 2f64.powi(-24),
        31 if mantissa == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + mantissa / 1024.0) * 2f64.powi(e - 15),
    }
}
