//! The decoded message: header fields, token, raw options, payload, and typed option accessors.

use std::fmt;

use super::options::{self, read_block, read_str, read_uint};
use super::CoapError;

/// The 2-bit message type (RFC 7252 §3, §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// CON: needs an ACK or RST.
    Confirmable = 0,
    /// NON: needs no acknowledgement.
    NonConfirmable = 1,
    /// ACK: acknowledges a CON, maybe with a piggy-backed response.
    Acknowledgement = 2,
    /// RST: rejects a message (cancels an observation, RFC 7641 §3.6).
    Reset = 3,
}

impl MessageType {
    /// The type for the two header bits (only the low two bits of `bits` are read).
    pub fn from_bits(bits: u8) -> Self {
        match bits & 0x3 {
            0 => Self::Confirmable,
            1 => Self::NonConfirmable,
            2 => Self::Acknowledgement,
            _ => Self::Reset,
        }
    }
}

impl TryFrom<u8> for MessageType {
    type Error = CoapError;

    fn try_from(value: u8) -> Result<Self, CoapError> {
        if value > 3 {
            return Err(CoapError::BadMessageType(value));
        }
        Ok(Self::from_bits(value))
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Confirmable => "CON",
            Self::NonConfirmable => "NON",
            Self::Acknowledgement => "ACK",
            Self::Reset => "RST",
        })
    }
}

/// One option: its number and raw value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CoapOption {
    /// The option number (Uri-Path 11, Observe 6, …).
    pub number: u16,
    /// The raw value bytes.
    pub value: Vec<u8>,
}

impl CoapOption {
    /// An option from its number and value.
    pub fn new(number: u16, value: impl Into<Vec<u8>>) -> Self {
        Self {
            number,
            value: value.into(),
        }
    }
}

/// A Block1/Block2 value (RFC 7959 §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Block {
    /// The block number (up to 20 bits).
    pub num: u32,
    /// More blocks follow.
    pub more: bool,
    /// Size exponent 0-6: the block holds `2^(szx + 4)` bytes.
    pub szx: u8,
}

impl Block {
    /// The block size in bytes, 16-1024.
    pub fn size(&self) -> usize {
        1 << (self.szx + 4)
    }
}

/// A CoAP message. Options are in wire order (sorted by number) after `decode`; `encode`
/// accepts them in any order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Message {
    /// CON, NON, ACK or RST.
    pub mtype: MessageType,
    /// The code byte, class << 5 | detail (0x01 GET, 0x45 2.05 Content).
    pub code: u8,
    /// The message ID, for deduplication and ACK matching.
    pub mid: u16,
    /// The token, 0-8 bytes.
    pub token: Vec<u8>,
    /// Every option, in wire order after decoding.
    pub options: Vec<CoapOption>,
    /// The payload (empty when there is none).
    pub payload: Vec<u8>,
}

impl Message {
    /// The values of every option numbered `number`, in order.
    pub fn option_values(&self, number: u16) -> impl Iterator<Item = &[u8]> {
        self.options
            .iter()
            .filter(move |option| option.number == number)
            .map(|option| option.value.as_slice())
    }

    /// The first option numbered `number`; later repeats of a non-repeatable option are to be
    /// treated as unrecognised (RFC 7252 §5.4.5).
    pub fn first_option(&self, number: u16) -> Option<&[u8]> {
        self.option_values(number).next()
    }

    fn strings(&self, number: u16) -> Result<Vec<&str>, CoapError> {
        self.option_values(number)
            .map(|value| read_str(number, value))
            .collect()
    }

    /// The first critical option devicehub does not act on ([`options::RECOGNISED_CRITICAL`]),
    /// in wire order; `None` when it understands every critical option (RFC 7252 §5.4.1).
    pub fn unrecognised_critical(&self) -> Option<u16> {
        self.options
            .iter()
            .map(|option| option.number)
            .find(|&number| options::unrecognised_critical(number))
    }

    /// Uri-Path segments joined with '/', with a leading '/' ("/" when there are none).
    pub fn uri_path(&self) -> Result<String, CoapError> {
        let mut path = String::new();
        for segment in self.option_values(options::URI_PATH) {
            path.push('/');
            path.push_str(read_str(options::URI_PATH, segment)?);
        }
        if path.is_empty() {
            path.push('/');
        }
        Ok(path)
    }

    /// The Uri-Query items, one per option (`key=value`).
    pub fn uri_query(&self) -> Result<Vec<&str>, CoapError> {
        self.strings(options::URI_QUERY)
    }

    /// The Location-Path segments.
    pub fn location_path(&self) -> Result<Vec<&str>, CoapError> {
        self.strings(options::LOCATION_PATH)
    }

    /// The Observe value, 0-3 bytes (RFC 7641 §2).
    pub fn observe(&self) -> Result<Option<u32>, CoapError> {
        self.uint(options::OBSERVE, 3)
    }

    /// The Content-Format, 0-2 bytes.
    pub fn content_format(&self) -> Result<Option<u16>, CoapError> {
        Ok(self.uint(options::CONTENT_FORMAT, 2)?.map(|v| v as u16))
    }

    /// The Accept content format, 0-2 bytes.
    pub fn accept(&self) -> Result<Option<u16>, CoapError> {
        Ok(self.uint(options::ACCEPT, 2)?.map(|v| v as u16))
    }

    /// The Block1 option (request payload blocks).
    pub fn block1(&self) -> Result<Option<Block>, CoapError> {
        self.block(options::BLOCK1)
    }

    /// The Block2 option (response payload blocks).
    pub fn block2(&self) -> Result<Option<Block>, CoapError> {
        self.block(options::BLOCK2)
    }

    fn uint(&self, number: u16, max: usize) -> Result<Option<u32>, CoapError> {
        self.first_option(number)
            .map(|value| read_uint(number, value, max))
            .transpose()
    }

    fn block(&self, number: u16) -> Result<Option<Block>, CoapError> {
        self.first_option(number)
            .map(|value| read_block(number, value))
            .transpose()
    }
}
