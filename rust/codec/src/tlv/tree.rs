//! The decoded TLV tree: node kinds, node bodies and the nesting rules between them.

use std::fmt;

/// The identifier kind in bits 7-6 of the type byte (spec §6); the discriminant is those bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TlvKind {
    /// `00`: an Object Instance, its value is a run of Resource / Multiple Resource TLVs.
    ObjectInstance = 0,
    /// `01`: one instance of a multiple resource, with a value.
    ResourceInstance = 1,
    /// `10`: a Multiple Resource, its value is a run of Resource Instance TLVs.
    MultipleResource = 2,
    /// `11`: a single-instance Resource with a value.
    Resource = 3,
}

impl TlvKind {
    /// The kind named by bits 1-0 of `bits` (callers pass the type byte shifted right by 6).
    pub const fn from_bits(bits: u8) -> Self {
        match bits & 0b11 {
            0 => Self::ObjectInstance,
            1 => Self::ResourceInstance,
            2 => Self::MultipleResource,
            _ => Self::Resource,
        }
    }

    /// True for the kinds whose value is a run of nested TLVs.
    pub const fn is_container(self) -> bool {
        matches!(self, Self::ObjectInstance | Self::MultipleResource)
    }

    /// Whether a TLV of kind `child` may appear directly inside one of kind `self`.
    ///
    /// Object Instances hold Resources and Multiple Resources, Multiple Resources hold Resource
    /// Instances, leaves hold nothing (spec §6). These rules alone bound a tree to two levels of
    /// nesting (Object Instance → Multiple Resource → Resource Instance).
    pub const fn may_contain(self, child: TlvKind) -> bool {
        match self {
            Self::ObjectInstance => matches!(child, Self::Resource | Self::MultipleResource),
            Self::MultipleResource => matches!(child, Self::ResourceInstance),
            Self::ResourceInstance | Self::Resource => false,
        }
    }
}

impl fmt::Display for TlvKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ObjectInstance => "object instance",
            Self::ResourceInstance => "resource instance",
            Self::MultipleResource => "multiple resource",
            Self::Resource => "resource",
        })
    }
}

/// What a TLV holds: nested TLVs for the two container kinds, raw value bytes for the leaves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TlvBody {
    /// Children must be [`TlvBody::Resource`] or [`TlvBody::MultipleResource`].
    ObjectInstance(Vec<Tlv>),
    /// A value of one instance of a multiple resource.
    ResourceInstance(Vec<u8>),
    /// Children must be [`TlvBody::ResourceInstance`].
    MultipleResource(Vec<Tlv>),
    /// The value of a single-instance resource.
    Resource(Vec<u8>),
}

/// One TLV: an identifier (object instance, resource or resource instance id) and its body.
///
/// A top-level run may hold any kind: reading `/O` gives Object Instances, `/O/I` Resources and
/// Multiple Resources, `/O/I/R` of a multiple resource may give bare Resource Instances.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tlv {
    /// The 8- or 16-bit identifier; the encoder picks the width.
    pub id: u16,
    /// The kind and its content.
    pub body: TlvBody,
}

impl Tlv {
    /// An Object Instance holding `children`.
    pub fn object_instance(id: u16, children: Vec<Tlv>) -> Self {
        Self {
            id,
            body: TlvBody::ObjectInstance(children),
        }
    }

    /// A Resource Instance with `value`.
    pub fn resource_instance(id: u16, value: impl Into<Vec<u8>>) -> Self {
        Self {
            id,
            body: TlvBody::ResourceInstance(value.into()),
        }
    }

    /// A Multiple Resource holding `children`.
    pub fn multiple_resource(id: u16, children: Vec<Tlv>) -> Self {
        Self {
            id,
            body: TlvBody::MultipleResource(children),
        }
    }

    /// A single-instance Resource with `value`.
    pub fn resource(id: u16, value: impl Into<Vec<u8>>) -> Self {
        Self {
            id,
            body: TlvBody::Resource(value.into()),
        }
    }

    /// This node's kind.
    pub fn kind(&self) -> TlvKind {
        match self.body {
            TlvBody::ObjectInstance(_) => TlvKind::ObjectInstance,
            TlvBody::ResourceInstance(_) => TlvKind::ResourceInstance,
            TlvBody::MultipleResource(_) => TlvKind::MultipleResource,
            TlvBody::Resource(_) => TlvKind::Resource,
        }
    }

    /// The value bytes of a leaf; `None` for a container.
    pub fn value(&self) -> Option<&[u8]> {
        match &self.body {
            TlvBody::ResourceInstance(v) | TlvBody::Resource(v) => Some(v),
            TlvBody::ObjectInstance(_) | TlvBody::MultipleResource(_) => None,
        }
    }

    /// The children of a container; empty for a leaf.
    pub fn children(&self) -> &[Tlv] {
        match &self.body {
            TlvBody::ObjectInstance(c) | TlvBody::MultipleResource(c) => c,
            TlvBody::ResourceInstance(_) | TlvBody::Resource(_) => &[],
        }
    }
}
