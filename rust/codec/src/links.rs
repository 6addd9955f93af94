//! CoRE link format (RFC 6690) of LwM2M Register and Update payloads, parsed as tolerantly as
//! `devicehub.lwm2m.links.parse_links` (its pure-Python twin): same links, same errors.
//!
//! Whitespace is Python's `str.isspace` (U+001C..U+001F included), so that `strip()` on the
//! Python side and [`py_strip`] here agree on every input.

use std::borrow::Cow;

use thiserror::Error;

/// More LwM2M links than this in one payload is refused.
pub const MAX_LINKS: usize = 20_000;
/// Content-Format of opaque values: their `v=` arrives base64.
pub const OPAQUE_CF: u64 = 42;
/// The target quoted in a [`LinkError::Target`] is cut to this many characters.
pub const TARGET_SHOWN: usize = 40;

/// Why a payload is not link format devicehub can read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LinkError {
    #[error("link format is not UTF-8")]
    NotUtf8,
    #[error("unterminated quote or bracket")]
    Unterminated,
    /// A link whose target is not `<…>`; holds the target's first [`TARGET_SHOWN`] characters.
    #[error("link target must be <…>: {0:?}")]
    Target(String),
    #[error("more than {MAX_LINKS} links")]
    TooMany,
}

/// One object, instance or resource link with the attributes LwM2M and the Pelion client use.
/// `Hash`: equal links of many devices are shared (the Python binding's `LinkTable`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Link {
    pub path: String,
    pub rt: Option<String>,
    pub ct: Option<u64>,
    pub obs: bool,
    pub iface: Option<String>,
    /// `v=`: the value's UTF-8 bytes, or decoded from base64 when `ct` is [`OPAQUE_CF`].
    pub value: Option<Vec<u8>>,
    /// `aobs=`: the auto-observe token, when it is 0..=0xFFFF.
    pub aobs: Option<u16>,
    pub deleted: bool,
}

/// Python's `str.isspace`.
pub fn py_space(c: char) -> bool {
    matches!(
        c,
        '\t'..='\r'
            | '\u{1c}'..='\u{20}'
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// Python's `str.strip()`.
pub fn py_strip(text: &str) -> &str {
    text.trim_matches(py_space)
}

/// Split on `separator` outside double quotes and angle brackets (all ASCII: byte positions are
/// character boundaries in UTF-8). Inside quotes a backslash quotes the next byte (RFC 6690 §2's
/// quoted-string is RFC 2616 §2.2's: `quoted-pair = "\" CHAR`); when that is a multi-byte
/// character, its other bytes are never a quote, bracket or separator.
fn split(text: &str, separator: u8) -> Result<Vec<&str>, LinkError> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut bracketed, mut escaped) = (0, false, false, false);
    for (index, &byte) in text.as_bytes().iter().enumerate() {
        if escaped {
            escaped = false;
            continue;
        }
        match byte {
            b'\\' if quoted => escaped = true,
            b'"' if !bracketed => quoted = !quoted,
            b'<' if !quoted => bracketed = true,
            b'>' if !quoted => bracketed = false,
            _ if byte == separator && !quoted && !bracketed => {
                parts.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    if quoted || bracketed {
        return Err(LinkError::Unterminated);
    }
    parts.push(&text[start..]);
    Ok(parts)
}

/// 1..=`most` ASCII digits.
fn ascii_digits(text: &str, most: usize) -> bool {
    !text.is_empty() && text.len() <= most && text.bytes().all(|b| b.is_ascii_digit())
}

fn valid_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let segments: Vec<&str> = rest.split('/').collect();
    (1..=4).contains(&segments.len())
        && segments
            .iter()
            .all(|s| ascii_digits(s, 5) && s.parse::<u32>().is_ok_and(|n| n <= 65_535))
}

fn int(text: Option<&str>) -> Option<u64> {
    text.filter(|t| ascii_digits(t, 10))
        .and_then(|t| t.parse().ok())
}

/// Every object, instance or resource link; the root link (`</>`) and non-LwM2M paths are skipped.
pub fn parse_links(payload: &[u8]) -> Result<Vec<Link>, LinkError> {
    let text = std::str::from_utf8(payload).map_err(|_| LinkError::NotUtf8)?;
    let mut links = Vec::new();
    for raw in split(py_strip(text), b',')? {
        let raw = py_strip(raw);
        if raw.is_empty() {
            continue;
        }
        let fields = split(raw, b';')?;
        let target = py_strip(fields[0]);
        if !(target.starts_with('<') && target.ends_with('>') && target.len() >= 2) {
            return Err(LinkError::Target(
                target.chars().take(TARGET_SHOWN).collect(),
            ));
        }
        let inner = target[1..target.len() - 1].trim_end_matches('/');
        if inner.is_empty() || !valid_path(inner) {
            continue; // the root `</>;rt="oma.lwm2m"`, or something that is not an LwM2M path
        }
        links.push(link(inner, &fields[1..]));
        if links.len() > MAX_LINKS {
            return Err(LinkError::TooMany);
        }
    }
    Ok(links)
}

/// A quoted-string's text: the quotes removed, each quoted-pair `\x` read as `x` (RFC 2616 §2.2);
/// a value that is not quoted as it is.
pub fn unquote(value: &str) -> Cow<'_, str> {
    if !(value.len() >= 2 && value.starts_with('"') && value.ends_with('"')) {
        return Cow::Borrowed(value);
    }
    let inner = &value[1..value.len() - 1];
    if !inner.contains('\\') {
        return Cow::Borrowed(inner);
    }
    let mut text = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => text.push(chars.next().unwrap_or('\\')), // a lone trailing `\` stays
            _ => text.push(c),
        }
    }
    Cow::Owned(text)
}

fn link(path: &str, fields: &[&str]) -> Link {
    // a later attribute of the same name wins, as in a dict
    let mut attrs: Vec<(&str, Option<Cow<'_, str>>)> = Vec::with_capacity(fields.len());
    for field in fields {
        let field = py_strip(field);
        let (name, value) = match field.split_once('=') {
            Some((name, value)) => (py_strip(name), Some(unquote(py_strip(value)))),
            None => (py_strip(field), None),
        };
        attrs.retain(|(n, _)| *n != name);
        attrs.push((name, value));
    }
    let get = |name: &str| {
        attrs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_deref())
    };
    let has = |name: &str| get(name).is_some();
    let ct = int(get("ct").flatten());
    let value = get("v").flatten().map(|raw| {
        if ct == Some(OPAQUE_CF) {
            if let Some(data) = base64_decode(raw) {
                return data;
            }
        }
        raw.as_bytes().to_vec()
    });
    Link {
        path: path.to_owned(),
        rt: get("rt").flatten().map(str::to_owned),
        ct,
        obs: has("obs"),
        iface: get("if").flatten().map(str::to_owned),
        value,
        aobs: int(get("aobs").flatten()).and_then(|n| u16::try_from(n).ok()),
        deleted: has("d"),
    }
}

fn sextet(byte: u8) -> Option<u32> {
    Some(match byte {
        b'A'..=b'Z' => byte - b'A',
        b'a'..=b'z' => byte - b'a' + 26,
        b'0'..=b'9' => byte - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    } as u32)
}

/// Python 3.11's `base64.b64decode(text, validate=True)`: the alphabet then at most two `=`;
/// a final partial group needs exactly its padding; left-over bits are ignored. None when Python
/// raises.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let data = bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len());
    let pads = bytes.len() - data;
    if pads > 2 || bytes[data..].iter().any(|&b| b != b'=') {
        return None;
    }
    let sextets: Vec<u32> = bytes[..data]
        .iter()
        .map(|&b| sextet(b))
        .collect::<Option<_>>()?;
    let ok = match sextets.len() % 4 {
        0 => pads == 0 || !sextets.is_empty(),
        2 => pads == 2,
        3 => pads == 1,
        _ => false,
    };
    if !ok {
        return None;
    }
    let mut out = Vec::with_capacity(sextets.len() * 3 / 4);
    for group in sextets.chunks(4) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, s)| acc | s << (18 - 6 * i));
        let take = group.len() - 1; // 4 sextets: 3 bytes, 3: 2, 2: 1
        out.extend_from_slice(&n.to_be_bytes()[1..1 + take]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn paths(payload: &str) -> Vec<String> {
        parse_links(payload.as_bytes())
            .unwrap()
            .into_iter()
            .map(|l| l.path)
            .collect()
    }

    #[test]
    fn plain_client_object_and_instance_links() {
        assert_eq!(
            paths("</>;rt=\"oma.lwm2m\",</1/0>,</3/0>,</3303>;ver=1.1,</5/>"),
            ["/1/0", "/3/0", "/3303", "/5"]
        );
    }

    #[test]
    fn pelion_resource_link_attributes() {
        let links = parse_links(
            b"</3303/0/5700>;rt=\"temp, C;x\";ct=42;if=\"sensor\";obs;v=\"QUJD\";aobs=\"7\";d",
        )
        .unwrap();
        assert_eq!(
            links,
            [Link {
                path: "/3303/0/5700".into(),
                rt: Some("temp, C;x".into()),
                ct: Some(42),
                obs: true,
                iface: Some("sensor".into()),
                value: Some(b"ABC".to_vec()),
                aobs: Some(7),
                deleted: true,
            }]
        );
    }

    #[test]
    fn values_that_are_not_base64_stay_text_and_tokens_above_16_bits_are_dropped() {
        let link = &parse_links(b"</1/0/1>;ct=42;v=\"QQ\";aobs=65536;ct=\"42\"").unwrap()[0];
        assert_eq!(link.value.as_deref(), Some(&b"QQ"[..]));
        assert_eq!(link.aobs, None);
    }

    #[test]
    fn non_lwm2m_paths_are_skipped() {
        assert!(paths("</a/0>,</65536>,</1/2/3/4/5>,</1//2>,<>,</³>").is_empty());
    }

    #[test]
    fn malformed_payloads_are_refused_with_their_reason() {
        assert_eq!(parse_links(b"\xff"), Err(LinkError::NotUtf8));
        assert_eq!(parse_links(b"</1/0>;rt=\"x"), Err(LinkError::Unterminated));
        assert_eq!(parse_links(b"</1/0"), Err(LinkError::Unterminated));
        assert_eq!(
            parse_links(b"</1/0>,3/0"),
            Err(LinkError::Target("3/0".into()))
        );
        let many = "</1/0>,".repeat(MAX_LINKS + 1);
        assert_eq!(parse_links(many.as_bytes()), Err(LinkError::TooMany));
    }

    #[test]
    fn quoted_pairs_are_one_character_when_splitting_and_reading() {
        let links = parse_links(br#"</3/0/0>;rt="a\"b,</1/0>;c\\";v="\x\"";if=x"y,z""#).unwrap();
        assert_eq!(links.len(), 1);
        assert_eq!(links[0].rt.as_deref(), Some(r#"a"b,</1/0>;c\"#));
        assert_eq!(links[0].value.as_deref(), Some(&br#"x""#[..]));
        assert_eq!(links[0].iface.as_deref(), Some(r#"x"y,z""#)); // not quoted: kept as it is
        assert_eq!(
            parse_links(br#"</1/0>;rt="a\""#),
            Err(LinkError::Unterminated)
        );
        assert_eq!(unquote(r#""a\""#), r#"a\"#); // a lone trailing backslash stays
    }

    #[test]
    fn python_whitespace_is_stripped() {
        assert_eq!(
            paths("\u{1c} </1/0>\u{3000},\u{85}</2/0>"),
            ["/1/0", "/2/0"]
        );
    }

    #[test]
    fn base64_as_python_validate_true() {
        for (text, want) in [
            ("", Some(&b""[..])),
            ("QQ==", Some(b"A")),
            ("QR==", Some(b"A")),
            ("QUI=", Some(b"AB")),
            ("QUJD=", Some(b"ABC")),
            ("QUJD==", Some(b"ABC")),
            ("QQ", None),
            ("QQ=", None),
            ("QUI==", None),
            ("Q", None),
            ("=", None),
            ("QQ==QQ", None),
            ("QU JD", None),
        ] {
            assert_eq!(base64_decode(text).as_deref(), want, "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn parsing_never_panics(payload in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_links(&payload);
        }

        #[test]
        fn link_format_pieces_never_panic(parts in proptest::collection::vec(
            prop_oneof![
                Just("<".to_owned()), Just(">".to_owned()), Just("\"".to_owned()), Just(",".to_owned()),
                Just(";".to_owned()), Just("=".to_owned()), Just("/".to_owned()), Just("ct=42".to_owned()),
                Just("v=".to_owned()), "[0-9]{1,6}", "[A-Za-z+/=]{0,6}", "\\PC{0,3}",
            ],
            0..40,
        )) {
            let _ = parse_links(parts.concat().as_bytes());
        }

        #[test]
        fn escaped_quoted_strings_read_back_to_their_text(text in "\\PC{0,20}") {
            let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
            let links = parse_links(format!("</1/0>;rt=\"{escaped}\"").as_bytes()).unwrap();
            prop_assert_eq!(links[0].rt.as_deref(), Some(text.as_str()));
        }

        #[test]
        fn formatted_links_parse_back(
            items in proptest::collection::vec(
                ((0u32..=65_535, proptest::option::of(0u32..=65_535)), any::<bool>(), proptest::option::of(0u32..=65_535)),
                0..20,
            )
        ) {
            let text: Vec<String> = items
                .iter()
                .map(|((object, instance), obs, aobs)| {
                    let mut link = match instance {
                        Some(i) => format!("</{object}/{i}>"),
                        None => format!("</{object}>"),
                    };
                    if *obs { link.push_str(";obs"); }
                    if let Some(a) = aobs { link.push_str(&format!(";aobs=\"{a}\"")); }
                    link
                })
                .collect();
            let links = parse_links(text.join(",").as_bytes()).unwrap();
            prop_assert_eq!(links.len(), items.len());
            for (link, ((object, instance), obs, aobs)) in links.iter().zip(&items) {
                let path = match instance { Some(i) => format!("/{object}/{i}"), None => format!("/{object}") };
                prop_assert_eq!(&link.path, &path);
                prop_assert_eq!(link.obs, *obs);
                prop_assert_eq!(link.aobs.map(u32::from), *aobs);
            }
        }
    }
}
