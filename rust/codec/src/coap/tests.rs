//! CoAP codec tests: real-client traces (lwm2m-device-side.md §1, §4, §8), the extended
//! delta/length boundaries, every malformed class, and property tests (round trip; arbitrary
//! bytes never panic and re-encode byte for byte).

use proptest::prelude::*;

use super::options::*;
use super::*;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// Decode must give `message` and encoding it must give `bytes` exactly.
fn assert_both_ways(bytes: &[u8], message: &Message) {
    assert_eq!(&decode(bytes).unwrap(), message);
    assert_eq!(encode(message).unwrap(), bytes);
    assert_eq!(encoded_len(message).unwrap(), bytes.len());
}

fn message(mtype: MessageType, code: u8, mid: u16, token: &[u8]) -> Message {
    Message {
        mtype,
        code,
        mid,
        token: token.to_vec(),
        options: Vec::new(),
        payload: Vec::new(),
    }
}

fn with_options(mut m: Message, options: &[(u16, &[u8])]) -> Message {
    m.options = options
        .iter()
        .map(|&(n, v)| CoapOption::new(n, v))
        .collect();
    m
}

// ---- real-client traces --------------------------------------------------------------------------

const WAKAAMA_LINKS: &str = "</>;rt=\"oma.lwm2m\";ct=110,</1>;ver=1.1,</1/0>,</2/0>,</3/0>,</4/0>,</5/0>,</6/0>,</7/0>,</31024>;ver=1.0,</31024/10>,</31024/11>,</31024/12>";

/// Wakaama's first datagram (spec §1): CON POST /rd, CF 40, four Uri-Query items.
#[test]
fn wakaama_register() {
    let mut bytes = hex("44 02 6d9a 9a6d2c69 b2 7264 11 28 39 6c776d326d3d312e31 04 65703d58 03 623d55 05 6c743d3630 ff");
    bytes.extend_from_slice(WAKAAMA_LINKS.as_bytes());
    let mut expected = with_options(
        message(MessageType::Confirmable, 0x02, 0x6d9a, &hex("9a6d2c69")),
        &[
            (URI_PATH, b"rd"),
            (CONTENT_FORMAT, &[40]),
            (URI_QUERY, b"lwm2m=1.1"),
            (URI_QUERY, b"ep=X"),
            (URI_QUERY, b"b=U"),
            (URI_QUERY, b"lt=60"),
        ],
    );
    expected.payload = WAKAAMA_LINKS.as_bytes().to_vec();
    assert_both_ways(&bytes, &expected);
    assert_eq!(expected.uri_path().unwrap(), "/rd");
    assert_eq!(
        expected.uri_query().unwrap(),
        ["lwm2m=1.1", "ep=X", "b=U", "lt=60"]
    );
    assert_eq!(expected.content_format(), Ok(Some(40)));
    assert_eq!(expected.observe(), Ok(None));
    assert_eq!(expected.accept(), Ok(None));
    assert_eq!(expected.block1(), Ok(None));
}

/// The server's answer (spec §2, §8): ACK 2.01, Location-Path rd/<account>/<device-id>.
#[test]
fn register_response_location_path() {
    let bytes = hex("64 41 6d9a 9a6d2c69 82 7264 03 616363 06 646576303031");
    let expected = with_options(
        message(MessageType::Acknowledgement, 0x41, 0x6d9a, &hex("9a6d2c69")),
        &[
            (LOCATION_PATH, b"rd"),
            (LOCATION_PATH, b"acc"),
            (LOCATION_PATH, b"dev001"),
        ],
    );
    assert_both_ways(&bytes, &expected);
    assert_eq!(expected.location_path().unwrap(), ["rd", "acc", "dev001"]);
    assert_eq!(expected.uri_path().unwrap(), "/");
}

/// Observe request (spec §4): CON GET /3303/0/5700, empty Observe (0), Accept 11542.
#[test]
fn observe_request_with_empty_observe_and_accept() {
    let bytes = hex("44 01 0001 01020304 60 54 33333033 01 30 04 35373030 62 2d16");
    let expected = with_options(
        message(MessageType::Confirmable, 0x01, 1, &hex("01020304")),
        &[
            (OBSERVE, b""),
            (URI_PATH, b"3303"),
            (URI_PATH, b"0"),
            (URI_PATH, b"5700"),
            (ACCEPT, &[0x2d, 0x16]),
        ],
    );
    assert_both_ways(&bytes, &expected);
    assert_eq!(expected.observe(), Ok(Some(0)));
    assert_eq!(expected.uri_path().unwrap(), "/3303/0/5700");
    assert_eq!(expected.accept(), Ok(Some(11542)));
}

/// Wakaama's NON 2.05 notification (spec §4) with the `/31024/10` TLV of spec §6.
#[test]
fn wakaama_non_notification() {
    let bytes = hex("54 45 1234 9a6d2c69 61 07 62 2d16 ff 080a0b c10114 c403c1f00000 c005");
    let mut expected = with_options(
        message(MessageType::NonConfirmable, 0x45, 0x1234, &hex("9a6d2c69")),
        &[(OBSERVE, &[7]), (CONTENT_FORMAT, &[0x2d, 0x16])],
    );
    expected.payload = hex("080a0b c10114 c403c1f00000 c005");
    assert_both_ways(&bytes, &expected);
    assert_eq!(expected.observe(), Ok(Some(7)));
    assert_eq!(expected.content_format(), Ok(Some(11542)));
}

/// Mbed auto-observation (spec §8): CON 2.05, the 2-byte token 517 from `aobs`, a 3-byte
/// Observe, text payload; then the server's empty ACK and a reactive-cancel RST.
#[test]
fn mbed_con_notification_ack_and_rst() {
    let bytes = hex("42 45 beef 0205 63 01e240 60 ff 41524d");
    let mut expected = with_options(
        message(MessageType::Confirmable, 0x45, 0xbeef, &[0x02, 0x05]),
        &[(OBSERVE, &[0x01, 0xe2, 0x40]), (CONTENT_FORMAT, b"")],
    );
    expected.payload = b"ARM".to_vec();
    assert_both_ways(&bytes, &expected);
    assert_eq!(expected.observe(), Ok(Some(123_456)));
    assert_eq!(expected.content_format(), Ok(Some(0)));

    assert_both_ways(
        &hex("60 00 beef"),
        &message(MessageType::Acknowledgement, 0, 0xbeef, b""),
    );
    assert_both_ways(
        &hex("70 00 beef"),
        &message(MessageType::Reset, 0, 0xbeef, b""),
    );
}

/// Firmware transfer (RFC 7959 §2.2): Block1 2/more/1024 on a PUT, Block2 5/last/64 answer.
#[test]
fn block_options() {
    let put = with_options(
        message(MessageType::Confirmable, 0x03, 9, b"t"),
        &[(URI_PATH, b"5"), (URI_PATH, b"0"), (BLOCK1, &[0x2e])],
    );
    let bytes = encode(&put).unwrap();
    assert_eq!(bytes, hex("41 03 0009 74 b1 35 01 30 d1 03 2e"));
    assert_eq!(
        decode(&bytes).unwrap().block1(),
        Ok(Some(Block {
            num: 2,
            more: true,
            szx: 6
        }))
    );
    assert_eq!(
        Block {
            num: 2,
            more: true,
            szx: 6
        }
        .size(),
        1024
    );

    let answer = with_options(
        message(MessageType::Acknowledgement, 0x45, 9, b"t"),
        &[(BLOCK2, &[0x01, 0x02, 0x52])],
    );
    let decoded = decode(&encode(&answer).unwrap()).unwrap();
    assert_eq!(
        decoded.block2(),
        Ok(Some(Block {
            num: 0x1025,
            more: false,
            szx: 2
        }))
    );
    assert_eq!(decoded.block1(), Ok(None));
}

// ---- extended delta / length boundaries (RFC 7252 §3.1) ------------------------------------------

fn single_option(number: u16, value: &[u8]) -> Message {
    with_options(
        message(MessageType::Confirmable, 0x01, 0, b""),
        &[(number, value)],
    )
}

#[test]
fn option_delta_nibble_boundaries() {
    let cases: [(u16, &str); 7] = [
        (12, "c0"),
        (13, "d0 00"),
        (14, "d0 01"),
        (268, "d0 ff"),
        (269, "e0 0000"),
        (270, "e0 0001"),
        (65535, "e0 fef2"),
    ];
    for (number, header) in cases {
        let bytes = [hex("40 01 0000"), hex(header)].concat();
        assert_both_ways(&bytes, &single_option(number, b""));
    }
}

#[test]
fn option_length_nibble_boundaries() {
    for (length, header) in [
        (12, "0c"),
        (13, "0d 00"),
        (268, "0d ff"),
        (269, "0e 0000"),
        (1000, "0e 02db"),
    ] {
        let value = vec![0xAB; length];
        let bytes = [hex("40 01 0000"), hex(header), value.clone()].concat();
        assert_both_ways(&bytes, &single_option(0, &value));
    }
}

#[test]
fn largest_two_byte_delta_overflows_the_option_number() {
    // 0xFFFF + 269 = 65804, the largest delta the wire can state, is past 65 535.
    assert_eq!(
        decode(&hex("40 01 0000 e0 ffff")),
        Err(CoapError::OptionNumberTooLarge(65804))
    );
    // Deltas that add up past 65 535 too.
    assert_eq!(
        decode(&hex("40 01 0000 e0 fef2 10")),
        Err(CoapError::OptionNumberTooLarge(65536))
    );
}

#[test]
fn largest_two_byte_length_is_too_long_to_encode_and_too_large_to_decode() {
    let value = vec![0u8; MAX_OPTION_EXTENDED + 1];
    assert_eq!(
        encode(&single_option(1, &value)),
        Err(CoapError::OptionTooLong(65805))
    );
    let value = vec![0u8; MAX_OPTION_EXTENDED];
    assert!(matches!(
        encode(&single_option(1, &value)),
        Err(CoapError::MessageTooLarge(_))
    ));
    let mut bytes = hex("40 01 0000 0e ffff");
    bytes.resize(bytes.len() + MAX_OPTION_EXTENDED, 0);
    assert!(matches!(decode(&bytes), Err(CoapError::MessageTooLarge(_))));
}

#[test]
fn encode_sorts_options_stably_and_delta_encodes() {
    let unsorted = with_options(
        message(MessageType::Confirmable, 0x02, 7, b""),
        &[
            (URI_QUERY, b"ep=a"),
            (URI_PATH, b"rd"),
            (CONTENT_FORMAT, &[40]),
            (URI_QUERY, b"lt=5"),
        ],
    );
    let decoded = decode(&encode(&unsorted).unwrap()).unwrap();
    let order: Vec<(u16, &[u8])> = decoded
        .options
        .iter()
        .map(|o| (o.number, &o.value[..]))
        .collect();
    assert_eq!(
        order,
        [
            (11, &b"rd"[..]),
            (12, &[40][..]),
            (15, &b"ep=a"[..]),
            (15, &b"lt=5"[..])
        ]
    );
    assert_eq!(decoded.uri_query().unwrap(), ["ep=a", "lt=5"]);
}

#[test]
fn encode_uint_is_minimal_big_endian() {
    assert_eq!(encode_uint(0), b"");
    assert_eq!(encode_uint(1), [1]);
    assert_eq!(encode_uint(255), [0xff]);
    assert_eq!(encode_uint(256), [1, 0]);
    assert_eq!(encode_uint(11542), [0x2d, 0x16]);
    assert_eq!(encode_uint(0xFF_FFFF), [0xff, 0xff, 0xff]);
    assert_eq!(encode_uint(u64::MAX), [0xff; 8]);
}

#[test]
fn uint_options_accept_leading_zeros() {
    let m = decode(&hex("40 01 0000 63 000005")).unwrap();
    assert_eq!(m.observe(), Ok(Some(5)));
}

#[test]
fn repeated_non_repeatable_option_reads_the_first() {
    let m = decode(&hex("40 01 0000 61 05 01 06")).unwrap();
    assert_eq!(m.observe(), Ok(Some(5)));
}

#[test]
fn uri_path_keeps_empty_segments() {
    let m = decode(&hex("40 01 0000 b2 7264 00")).unwrap();
    assert_eq!(m.uri_path().unwrap(), "/rd/");
}

#[test]
fn unknown_options_stay_raw_and_unchecked() {
    // Uri-Host (3) with non-UTF-8 bytes, Size1 (60) of 8 bytes: not pre-parsed, not checked.
    let m = with_options(
        message(MessageType::NonConfirmable, 0x45, 1, b""),
        &[(URI_HOST, &[0xff, 0xfe]), (SIZE1, &[1; 8])],
    );
    assert_eq!(decode(&encode(&m).unwrap()).unwrap(), m);
}

// ---- malformed input -----------------------------------------------------------------------------

#[test]
fn malformed_header_and_token() {
    assert_eq!(decode(b""), Err(CoapError::TruncatedHeader(0)));
    assert_eq!(decode(&hex("40 01 00")), Err(CoapError::TruncatedHeader(3)));
    assert_eq!(decode(&hex("00 01 0000")), Err(CoapError::BadVersion(0)));
    assert_eq!(decode(&hex("80 01 0000")), Err(CoapError::BadVersion(2)));
    assert_eq!(decode(&hex("c0 01 0000")), Err(CoapError::BadVersion(3)));
    for tkl in 9..=15u8 {
        let mut bytes = vec![0x40 | tkl, 0x01, 0, 0];
        bytes.extend_from_slice(&[0; 15]);
        assert_eq!(
            decode(&bytes),
            Err(CoapError::BadTokenLength(usize::from(tkl)))
        );
    }
    assert_eq!(
        decode(&hex("48 01 0000 01020304")),
        Err(CoapError::TruncatedToken { length: 8 })
    );
}

#[test]
fn empty_message_must_be_exactly_four_bytes() {
    assert_eq!(
        decode(&hex("41 00 0000 aa")),
        Err(CoapError::NonEmptyEmptyMessage)
    );
    assert_eq!(
        decode(&hex("60 00 0000 ff 00")),
        Err(CoapError::NonEmptyEmptyMessage)
    );
    assert_eq!(
        decode(&hex("70 00 0000 10")),
        Err(CoapError::NonEmptyEmptyMessage)
    );
    let mut m = message(MessageType::Acknowledgement, 0, 1, b"");
    m.payload = b"x".to_vec();
    assert_eq!(encode(&m), Err(CoapError::NonEmptyEmptyMessage));
}

#[test]
fn reserved_nibbles_are_errors_unless_payload_marker() {
    assert_eq!(
        decode(&hex("40 01 0000 f0")),
        Err(CoapError::ReservedNibble { offset: 4 })
    );
    assert_eq!(
        decode(&hex("40 01 0000 0f")),
        Err(CoapError::ReservedNibble { offset: 4 })
    );
    assert_eq!(
        decode(&hex("40 01 0000 10 1f")),
        Err(CoapError::ReservedNibble { offset: 5 })
    );
    assert_eq!(decode(&hex("40 01 0000 ff")), Err(CoapError::EmptyPayload));
    assert_eq!(
        decode(&hex("41 45 0000 aa 61 01 ff")),
        Err(CoapError::EmptyPayload)
    );
}

#[test]
fn truncated_options() {
    for bytes in [
        "40 01 0000 d0",
        "40 01 0000 e0 00",
        "40 01 0000 0d",
        "40 01 0000 0e 01",
        "40 01 0000 03 6162",
        "40 01 0000 0d 00 00",
    ] {
        assert_eq!(
            decode(&hex(bytes)),
            Err(CoapError::TruncatedOption { offset: 4 }),
            "{bytes}"
        );
    }
}

#[test]
fn bad_pre_parsed_option_values() {
    assert_eq!(
        decode(&hex("40 01 0000 b2 ff fe")),
        Err(CoapError::InvalidUtf8 { number: 11 })
    );
    assert_eq!(
        decode(&hex("40 01 0000 f1 02 80")),
        Err(CoapError::ReservedNibble { offset: 4 })
    );
    assert_eq!(
        decode(&hex("40 01 0000 d1 02 80")),
        Err(CoapError::InvalidUtf8 { number: 15 })
    );
    assert_eq!(
        decode(&hex("40 01 0000 81 c3")),
        Err(CoapError::InvalidUtf8 { number: 8 })
    );
    let too_long = |number, length, max| {
        Err(CoapError::UintTooLong {
            number,
            length,
            max,
        })
    };
    assert_eq!(decode(&hex("40 01 0000 64 00000001")), too_long(6, 4, 3));
    assert_eq!(decode(&hex("40 01 0000 c3 000028")), too_long(12, 3, 2));
    assert_eq!(decode(&hex("40 01 0000 d3 04 000028")), too_long(17, 3, 2));
    assert_eq!(
        decode(&hex("40 01 0000 d4 0a 00000006")),
        too_long(23, 4, 3)
    );
    assert_eq!(
        decode(&hex("40 01 0000 d4 0e 00000006")),
        too_long(27, 4, 3)
    );
    assert_eq!(
        decode(&hex("40 01 0000 d1 0a 07")),
        Err(CoapError::ReservedBlockSize { number: 23 })
    );
    assert_eq!(
        decode(&hex("40 01 0000 d1 0e 0f")),
        Err(CoapError::ReservedBlockSize { number: 27 })
    );
}

#[test]
fn oversized_input_is_refused_before_parsing() {
    let bytes = vec![0x40; MAX_MESSAGE_LEN + 1];
    assert_eq!(
        decode(&bytes),
        Err(CoapError::MessageTooLarge(MAX_MESSAGE_LEN + 1))
    );
}

#[test]
fn unencodable_messages() {
    let m = message(MessageType::Confirmable, 1, 0, &[0; 9]);
    assert_eq!(encode(&m), Err(CoapError::BadTokenLength(9)));
    assert_eq!(MessageType::try_from(4), Err(CoapError::BadMessageType(4)));
    assert_eq!(MessageType::try_from(3), Ok(MessageType::Reset));
    let mut out = vec![1, 2];
    assert!(encode_into(&m, &mut out).is_err());
    assert_eq!(out, [1, 2], "a failed encode leaves the buffer alone");
}

// ---- properties ----------------------------------------------------------------------------------

/// Any option the codec accepts: raw unchecked ones, and valid values of the pre-parsed ones.
fn any_option() -> impl Strategy<Value = CoapOption> {
    let checked = [
        URI_PATH,
        URI_QUERY,
        LOCATION_PATH,
        OBSERVE,
        CONTENT_FORMAT,
        ACCEPT,
        BLOCK1,
        BLOCK2,
    ];
    let raw = (any::<u16>(), prop::collection::vec(any::<u8>(), 0..300))
        .prop_filter(
            "pre-parsed options have their own strategies",
            move |(n, _)| !checked.contains(n),
        )
        .prop_map(|(n, v)| CoapOption::new(n, v));
    let text = (
        prop::sample::select(vec![URI_PATH, URI_QUERY, LOCATION_PATH]),
        "\\PC{0,20}",
    )
        .prop_map(|(n, s)| CoapOption::new(n, s.into_bytes()));
    let uint = (
        prop::sample::select(vec![
            (OBSERVE, 0xFF_FFFFu64),
            (CONTENT_FORMAT, 0xFFFF),
            (ACCEPT, 0xFFFF),
        ]),
        any::<u64>(),
    )
        .prop_map(|((n, max), v)| CoapOption::new(n, encode_uint(v % (max + 1))));
    let block = (
        prop::sample::select(vec![BLOCK1, BLOCK2]),
        0u64..(1 << 20),
        any::<bool>(),
        0u64..7,
    )
        .prop_map(|(n, num, more, szx)| {
            CoapOption::new(n, encode_uint(num << 4 | u64::from(more) << 3 | szx))
        });
    prop_oneof![raw, text, uint, block]
}

fn any_message() -> impl Strategy<Value = Message> {
    (
        0u8..4,
        1u8..=255,
        any::<u16>(),
        prop::collection::vec(any::<u8>(), 0..=8),
        prop::collection::vec(any_option(), 0..8),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(mtype, code, mid, token, options, payload)| Message {
            mtype: MessageType::from_bits(mtype),
            code,
            mid,
            token,
            options,
            payload,
        })
}

proptest! {
    #[test]
    fn decode_inverts_encode(m in any_message()) {
        let bytes = encode(&m).unwrap();
        prop_assert_eq!(bytes.len(), encoded_len(&m).unwrap());
        let mut sorted = m.clone();
        sorted.options.sort_by_key(|o| o.number);
        let decoded = decode(&bytes).unwrap();
        prop_assert!(decoded.uri_path().is_ok() && decoded.observe().is_ok() && decoded.block2().is_ok());
        prop_assert_eq!(decoded, sorted);
    }

    /// The fuzz target: arbitrary bytes give a message or an error, never a panic; the wire
    /// form is canonical (one encoding per delta/length), so whatever decodes re-encodes to the
    /// same bytes and its accessors cannot fail.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(data in prop::collection::vec(any::<u8>(), 0..256)) {
        check_arbitrary(&data)?;
    }

    /// The same with a valid version and token length, to get past the header more often.
    #[test]
    fn decoding_arbitrary_options_never_panics(
        first in 0x40u8..0x49,
        code in 1u8..=255,
        rest in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let data = [&[first, code, 0, 0][..], &rest].concat();
        check_arbitrary(&data)?;
    }
}

fn check_arbitrary(data: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(m) = decode(data) {
        prop_assert_eq!(encode(&m).unwrap(), data);
        prop_assert!(m.uri_path().is_ok() && m.uri_query().is_ok() && m.location_path().is_ok());
        prop_assert!(m.observe().is_ok() && m.content_format().is_ok() && m.accept().is_ok());
        prop_assert!(m.block1().is_ok() && m.block2().is_ok());
    }
    Ok(())
}

// ---- critical options (RFC 7252 §5.4.1) ----------------------------------------------------------

#[test]
fn the_first_unrecognised_critical_option_is_named() {
    // a Register (Uri-Path, Uri-Query, Content-Format) has none; elective options never count
    let register = decode(&hex(
        "44 02 6d9a 9a6d2c69 b2 7264 11 28 39 6c776d326d3d312e31",
    ))
    .unwrap();
    assert_eq!(register.unrecognised_critical(), None);
    let elective = single_option(SIZE1, &[1]);
    assert_eq!(elective.unrecognised_critical(), None);
    for number in RECOGNISED_CRITICAL {
        assert_eq!(single_option(number, b"").unrecognised_critical(), None);
    }
    // If-Match (1), If-None-Match (5) and unknown odd numbers are unrecognised; the first in wire order
    assert_eq!(
        single_option(IF_MATCH, b"").unrecognised_critical(),
        Some(1)
    );
    let request = |options: &[(u16, &[u8])]| {
        let m = with_options(message(MessageType::Confirmable, 0x01, 0, b""), options);
        decode(&encode(&m).unwrap()).unwrap()
    };
    let m = request(&[
        (IF_NONE_MATCH, b""),
        (URI_PATH, b"rd"),
        (24, b""),
        (65535, b""),
    ]);
    assert_eq!(m.unrecognised_critical(), Some(IF_NONE_MATCH));
    let m = request(&[(URI_PATH, b"rd"), (36, b""), (65535, b""), (101, b"")]);
    assert_eq!(m.unrecognised_critical(), Some(101)); // wire order is by number
}

// ---- notification templates ----------------------------------------------------------------------

/// What the plain encoder writes for the notification a template fills in.
fn encoded_notification(
    mtype: MessageType,
    token: &[u8],
    options: &[(u16, &[u8])],
    mid: u16,
    observe: u32,
    payload: &[u8],
) -> Vec<u8> {
    let value = encode_uint(u64::from(observe));
    let mut all: Vec<(u16, &[u8])> = options.to_vec();
    all.push((OBSERVE, &value));
    let mut out = Vec::new();
    encode_parts_into(&mut out, mtype, 0x45, mid, token, &mut all, payload).unwrap();
    out
}

/// Wakaama's NON notification above, from a template: the same bytes.
#[test]
fn template_gives_wakaama_non_notification() {
    let template = NotificationTemplate::new(
        MessageType::NonConfirmable,
        0x45,
        &hex("9a6d2c69"),
        &[(CONTENT_FORMAT, &[0x2d, 0x16])],
    )
    .unwrap();
    let bytes = hex("54 45 1234 9a6d2c69 61 07 62 2d16 ff 080a0b c10114 c403c1f00000 c005");
    let payload = hex("080a0b c10114 c403c1f00000 c005");
    assert_eq!(template.encode(0x1234, 7, &payload).unwrap(), bytes);
}

/// Every Observe length (0-3 bytes), options on both sides of Observe (ETag 4 before; Content-
/// Format, Max-Age and a number needing a 2-byte delta after), with and without a payload.
#[test]
fn template_matches_encoder_at_every_observe_length() {
    let cases: [&[(u16, &[u8])]; 4] = [
        &[],
        &[(CONTENT_FORMAT, &[])],
        &[(4, b"etag"), (CONTENT_FORMAT, &[0x2d, 0x16]), (14, &[60])],
        &[(1, b"m"), (2048, b"far"), (CONTENT_FORMAT, &[42])],
    ];
    for options in cases {
        for mtype in [MessageType::Confirmable, MessageType::NonConfirmable] {
            let template = NotificationTemplate::new(mtype, 0x45, &[2, 5], options).unwrap();
            for observe in [0, 1, 255, 256, 0xFFFF, 0x1_0000, 0xFF_FFFF] {
                for payload in [&b""[..], b"21.5", &[7; 300]] {
                    assert_eq!(
                        template.encode(0xBEEF, observe, payload).unwrap(),
                        encoded_notification(mtype, &[2, 5], options, 0xBEEF, observe, payload)
                    );
                }
            }
        }
    }
}

#[test]
fn template_refuses_observe_option_and_large_observe() {
    assert_eq!(
        NotificationTemplate::new(MessageType::NonConfirmable, 0x45, &[1], &[(OBSERVE, &[1])]),
        Err(CoapError::ObserveInTemplate)
    );
    let template = NotificationTemplate::new(MessageType::NonConfirmable, 0x45, &[1], &[]).unwrap();
    let mut out = vec![9];
    assert!(template.encode_into(&mut out, 1, 0x100_0000, b"x").is_err());
    assert!(template
        .encode_into(&mut out, 1, 1, &vec![0; MAX_MESSAGE_LEN])
        .is_err());
    assert_eq!(out, [9]); // unchanged on error
    assert_eq!(
        NotificationTemplate::new(MessageType::NonConfirmable, 0x45, &[0; 9], &[]),
        Err(CoapError::BadTokenLength(9))
    );
}

proptest! {
    #[test]
    fn template_is_the_encoder(
        token in proptest::collection::vec(any::<u8>(), 0..=8),
        numbers in proptest::collection::vec(prop_oneof![1u16..6, 7u16..300, 300u16..3000], 0..5),
        mid in any::<u16>(),
        observe in 0u32..=0xFF_FFFF,
        payload in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let options: Vec<(u16, &[u8])> = numbers.iter().map(|&n| (n, &b"value"[..n as usize % 6])).collect();
        let template = NotificationTemplate::new(MessageType::NonConfirmable, 0x45, &token, &options).unwrap();
        prop_assert_eq!(
            template.encode(mid, observe, &payload).unwrap(),
            encoded_notification(MessageType::NonConfirmable, &token, &options, mid, observe, &payload)
        );
    }
}
