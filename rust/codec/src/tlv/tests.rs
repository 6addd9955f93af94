//! TLV codec tests: the worked examples of lwm2m-device-side.md §6 byte for byte, header forms,
//! malformed input, value codecs, and property tests (round trip; arbitrary bytes never panic).

use proptest::prelude::*;

use super::value::*;
use super::*;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// Decode must give `tree` and encoding `tree` must give `bytes` exactly.
fn assert_both_ways(bytes: &[u8], tree: &[Tlv]) {
    assert_eq!(decode(bytes).unwrap(), tree);
    assert_eq!(encode(tree).unwrap(), bytes);
}

// ---- spec §6 worked examples -------------------------------------------------------------------

#[test]
fn wakaama_object_instance_31024_10() {
    let bytes = hex("08 0a 0b  c1 01 14  c4 03 c1 f0 00 00  c0 05");
    let tree = [Tlv::object_instance(
        10,
        vec![
            Tlv::resource(1, [0x14]),
            Tlv::resource(3, hex("c1f00000")),
            Tlv::resource(5, []),
        ],
    )];
    assert_both_ways(&bytes, &tree);
    let children = tree[0].children();
    assert_eq!(read_int(children[0].value().unwrap()), Ok(20));
    assert_eq!(read_float(children[1].value().unwrap()), Ok(-30.0));
    assert_eq!(read_string(children[2].value().unwrap()), Ok(""));
}

#[test]
fn manufacturer_string_uses_8_bit_length_field() {
    let mut bytes = hex("c8 00 14");
    bytes.extend_from_slice(b"Open Mobile Alliance");
    assert_both_ways(&bytes, &[Tlv::resource(0, *b"Open Mobile Alliance")]);
}

#[test]
fn multiple_resource_available_power_sources() {
    let bytes = hex("86 06 41 00 01 41 01 05");
    let tree = [Tlv::multiple_resource(
        6,
        vec![
            Tlv::resource_instance(0, [1]),
            Tlv::resource_instance(1, [5]),
        ],
    )];
    assert_both_ways(&bytes, &tree);
}

#[test]
fn anjay_temperature_16_bit_ids() {
    assert_both_ways(
        &hex("e4 16 44 41 50 00 00"),
        &[Tlv::resource(5700, hex("41500000"))],
    );
    assert_eq!(read_float(&hex("41500000")), Ok(13.0));
    assert_both_ways(&hex("e3 16 45 43 65 6c"), &[Tlv::resource(5701, *b"Cel")]);
}

#[test]
fn write_payload_integer_43() {
    assert_both_ways(&hex("c1 01 2b"), &[Tlv::resource(1, encode_int(43))]);
}

#[test]
fn anjay_time_value() {
    assert_eq!(read_time(&hex("6b036a58")), Ok(0x6b03_6a58));
    assert_eq!(encode_time(0x6b03_6a58), hex("6b036a58"));
    // Wakaama's 8-byte clock form reads the same.
    assert_eq!(read_time(&hex("000000006b036a58")), Ok(0x6b03_6a58));
}

// ---- header forms ----------------------------------------------------------------------------

#[test]
fn shortest_header_for_every_length_and_id_width() {
    let cases: [(u16, usize, &str); 8] = [
        (0, 0, "c0 00"),
        (0, 7, "c7 00"),
        (0, 8, "c8 00 08"),
        (0, 255, "c8 00 ff"),
        (0, 256, "d0 00 01 00"),
        (0, 65_535, "d0 00 ff ff"),
        (0, 65_536, "d8 00 01 00 00"),
        (256, 65_536, "f8 01 00 01 00 00"),
    ];
    for (id, len, header) in cases {
        let tree = [Tlv::resource(id, vec![0xAB; len])];
        let bytes = encode(&tree).unwrap();
        let header = hex(header);
        assert_eq!(&bytes[..header.len()], &header[..], "id {id} len {len}");
        assert_eq!(bytes.len(), header.len() + len);
        assert_eq!(decode(&bytes).unwrap(), tree);
    }
    assert_eq!(encode(&[Tlv::resource(255, [])]).unwrap(), hex("c0 ff"));
    assert_eq!(encode(&[Tlv::resource(256, [])]).unwrap(), hex("e0 01 00"));
}

#[test]
fn maximum_24_bit_length_encodes_and_one_more_fails() {
    let bytes = encode(&[Tlv::resource(1, vec![0u8; MAX_VALUE_LEN])]).unwrap();
    assert_eq!(&bytes[..5], &hex("d8 01 ff ff ff")[..]);
    // Header plus maximal value is 4 bytes over the 16 MiB input cap.
    assert_eq!(
        decode(&bytes),
        Err(TlvError::InputTooLarge(MAX_INPUT_LEN + 4))
    );
    let over = vec![0u8; MAX_VALUE_LEN + 1];
    assert_eq!(
        encode(&[Tlv::resource(1, over)]),
        Err(TlvError::ValueTooLong(MAX_VALUE_LEN + 1))
    );
}

#[test]
fn input_of_exactly_16_mib_decodes() {
    let value_len = MAX_INPUT_LEN - 5;
    let bytes = encode(&[Tlv::resource(1, vec![7u8; value_len])]).unwrap();
    assert_eq!(bytes.len(), MAX_INPUT_LEN);
    assert_eq!(decode(&bytes).unwrap()[0].value().unwrap().len(), value_len);
}

#[test]
fn container_over_24_bits_fails_to_encode() {
    let half = vec![0u8; MAX_VALUE_LEN / 2];
    let tree = [Tlv::object_instance(
        0,
        vec![Tlv::resource(1, half.clone()), Tlv::resource(2, half)],
    )];
    assert!(matches!(encode(&tree), Err(TlvError::ValueTooLong(_))));
}

#[test]
fn length_field_ignores_low_bits_when_explicit() {
    // 11|0|01|111: bits 2-0 set although an 8-bit length field follows.
    assert_eq!(
        decode(&hex("cf 01 01 2b")).unwrap(),
        [Tlv::resource(1, [0x2b])]
    );
}

#[test]
fn empty_input_is_an_empty_run() {
    assert_eq!(decode(&[]).unwrap(), []);
    assert_eq!(encode::<Tlv>(&[]).unwrap(), Vec::<u8>::new());
}

#[test]
fn top_level_runs_of_every_kind_decode() {
    // Reading /3/0/6 may return bare Resource Instances.
    let tree = [
        Tlv::resource_instance(0, [1]),
        Tlv::resource_instance(1, [5]),
    ];
    assert_both_ways(&hex("41 00 01 41 01 05"), &tree);
    let objects = [
        Tlv::object_instance(0, vec![]),
        Tlv::object_instance(1, vec![Tlv::resource(0, [7])]),
    ];
    assert_both_ways(&hex("00 00 03 01 c1 00 07"), &objects);
}

// ---- malformed input -------------------------------------------------------------------------

#[test]
fn truncated_headers_are_errors() {
    for input in ["c8", "c8 00", "e0 16", "e0", "f0 16 44 00", "08 0a 01 c8"] {
        let err = decode(&hex(input)).unwrap_err();
        assert!(
            matches!(err, TlvError::TruncatedHeader { .. }),
            "{input}: {err:?}"
        );
    }
    assert_eq!(
        decode(&hex("c1 01 2b c8")),
        Err(TlvError::TruncatedHeader { offset: 3 })
    );
    // Offsets are reported relative to the whole input, also inside containers.
    assert_eq!(
        decode(&hex("08 0a 02 c8 00")),
        Err(TlvError::TruncatedHeader { offset: 3 })
    );
}

#[test]
fn length_past_end_is_an_error() {
    assert_eq!(
        decode(&hex("c1 01")),
        Err(TlvError::LengthPastEnd {
            offset: 0,
            length: 1,
            available: 0
        })
    );
    assert_eq!(
        decode(&hex("d8 01 ff ff ff 00")),
        Err(TlvError::LengthPastEnd {
            offset: 0,
            length: MAX_VALUE_LEN,
            available: 1
        })
    );
    // A child may not run past its parent even when the outer input continues.
    assert!(matches!(
        decode(&hex("08 00 02 c2 01 00 00")),
        Err(TlvError::LengthPastEnd { offset: 3, .. })
    ));
}

#[test]
fn nesting_rules_are_enforced_on_decode() {
    let bad = |parent, child| Err(TlvError::BadNesting { parent, child });
    use TlvKind::*;
    assert_eq!(
        decode(&hex("08 00 02 00 00")),
        bad(ObjectInstance, ObjectInstance)
    );
    assert_eq!(
        decode(&hex("08 00 02 40 00")),
        bad(ObjectInstance, ResourceInstance)
    );
    assert_eq!(decode(&hex("82 06 c0 00")), bad(MultipleResource, Resource));
    assert_eq!(
        decode(&hex("82 06 80 00")),
        bad(MultipleResource, MultipleResource)
    );
    // Depth 3: Object Instance → Multiple Resource → Multiple Resource.
    assert_eq!(
        decode(&hex("08 00 04 82 06 80 00")),
        bad(MultipleResource, MultipleResource)
    );
}

#[test]
fn nesting_rules_are_enforced_on_encode() {
    use TlvKind::*;
    let tree = [Tlv::object_instance(0, vec![Tlv::resource_instance(0, [])])];
    assert_eq!(
        encode(&tree),
        Err(TlvError::BadNesting {
            parent: ObjectInstance,
            child: ResourceInstance
        })
    );
    let tree = [Tlv::multiple_resource(0, vec![Tlv::resource(0, [])])];
    assert_eq!(
        encode(&tree),
        Err(TlvError::BadNesting {
            parent: MultipleResource,
            child: Resource
        })
    );
    let mut out = vec![9];
    assert!(encode_into(&tree, &mut out).is_err());
    assert_eq!(out, [9], "a failed encode appends nothing");
}

#[test]
fn oversize_input_is_rejected() {
    let data = vec![0u8; MAX_INPUT_LEN + 1];
    assert_eq!(
        decode(&data),
        Err(TlvError::InputTooLarge(MAX_INPUT_LEN + 1))
    );
}

#[test]
fn errors_render_messages() {
    let err = TlvError::BadNesting {
        parent: TlvKind::MultipleResource,
        child: TlvKind::Resource,
    };
    assert_eq!(
        err.to_string(),
        "a resource TLV cannot be inside a multiple resource"
    );
}

// ---- values ----------------------------------------------------------------------------------

#[test]
fn integers_use_the_shortest_width_at_every_boundary() {
    let cases: [(i64, usize); 16] = [
        (0, 1),
        (-1, 1),
        (127, 1),
        (-128, 1),
        (128, 2),
        (-129, 2),
        (32_767, 2),
        (-32_768, 2),
        (32_768, 4),
        (-32_769, 4),
        (i64::from(i32::MAX), 4),
        (i64::from(i32::MIN), 4),
        (i64::from(i32::MAX) + 1, 8),
        (i64::from(i32::MIN) - 1, 8),
        (i64::MAX, 8),
        (i64::MIN, 8),
    ];
    for (value, width) in cases {
        let bytes = encode_int(value);
        assert_eq!(bytes.len(), width, "{value}");
        assert_eq!(read_int(&bytes), Ok(value));
    }
    assert_eq!(encode_int(-1), [0xff]);
    assert_eq!(encode_int(128), [0x00, 0x80]);
}

#[test]
fn integers_of_other_widths_are_errors_and_wide_forms_read() {
    for len in [0, 3, 5, 6, 7, 9] {
        assert_eq!(
            read_int(&vec![0; len]),
            Err(TlvError::BadIntegerLength(len))
        );
        assert_eq!(
            read_unsigned(&vec![0; len]),
            Err(TlvError::BadIntegerLength(len))
        );
    }
    assert_eq!(read_int(&hex("0000002b")), Ok(43));
    assert_eq!(read_int(&hex("ffffffffffffffd5")), Ok(-43));
    assert_eq!(read_int(&hex("ff80")), Ok(-128));
}

#[test]
fn unsigned_integers_use_the_shortest_width() {
    for (value, width) in [
        (0u64, 1),
        (255, 1),
        (256, 2),
        (65_535, 2),
        (65_536, 4),
        (u64::from(u32::MAX), 4),
    ] {
        assert_eq!(encode_unsigned(value).len(), width, "{value}");
        assert_eq!(read_unsigned(&encode_unsigned(value)), Ok(value));
    }
    assert_eq!(encode_unsigned(u64::MAX), [0xff; 8]);
    assert_eq!(read_unsigned(&[0xff; 8]), Ok(u64::MAX));
    assert_eq!(read_unsigned(&[0x80]), Ok(128));
}

#[test]
fn floats_go_binary32_only_when_exact() {
    assert_eq!(encode_float(13.0), hex("41500000"));
    assert_eq!(encode_float(-30.0), hex("c1f00000"));
    assert_eq!(encode_float(0.5).len(), 4);
    assert_eq!(encode_float(f64::from(f32::MAX)).len(), 4);
    assert_eq!(encode_float(f64::INFINITY), hex("7f800000"));
    assert_eq!(encode_float(0.1).len(), 8);
    assert_eq!(encode_float(1e39).len(), 8);
    assert_eq!(encode_float(f64::MIN_POSITIVE).len(), 8);
    for value in [13.0, -30.0, 0.1, 1e39, -0.0, f64::NEG_INFINITY, f64::MAX] {
        let read = read_float(&encode_float(value)).unwrap();
        assert_eq!(read.to_bits(), value.to_bits(), "{value}");
    }
    assert!(read_float(&encode_float(f64::NAN)).unwrap().is_nan());
    assert_eq!(read_float(&13.0f64.to_be_bytes()), Ok(13.0));
    for len in [0, 1, 2, 3, 5, 7, 9] {
        assert_eq!(
            read_float(&vec![0; len]),
            Err(TlvError::BadFloatLength(len))
        );
    }
}

#[test]
fn booleans_are_one_byte_zero_or_one() {
    assert_eq!(encode_bool(true), [1]);
    assert_eq!(encode_bool(false), [0]);
    assert_eq!(read_bool(&[1]), Ok(true));
    assert_eq!(read_bool(&[0]), Ok(false));
    assert_eq!(read_bool(&[2]), Err(TlvError::BadBooleanValue(2)));
    assert_eq!(read_bool(&[]), Err(TlvError::BadBooleanLength(0)));
    assert_eq!(read_bool(&[0, 1]), Err(TlvError::BadBooleanLength(2)));
}

#[test]
fn strings_are_checked_utf8() {
    assert_eq!(read_string(b"Cel"), Ok("Cel"));
    assert_eq!(read_string("°C".as_bytes()), Ok("°C"));
    assert_eq!(
        read_string(b"ab\xff"),
        Err(TlvError::InvalidUtf8 { valid_up_to: 2 })
    );
}

#[test]
fn objlnk_is_two_big_endian_u16() {
    assert_eq!(encode_objlnk(3, 0), [0, 3, 0, 0]);
    assert_eq!(read_objlnk(&hex("00030000")), Ok((3, 0)));
    assert_eq!(read_objlnk(&encode_objlnk(65_535, 258)), Ok((65_535, 258)));
    assert_eq!(read_objlnk(&[0, 3, 0]), Err(TlvError::BadObjlnkLength(3)));
}

// ---- properties ------------------------------------------------------------------------------

fn leaf_value() -> impl Strategy<Value = Vec<u8>> {
    // Mostly short values, some past the 8- and 16-bit length boundaries.
    prop_oneof![
        8 => prop::collection::vec(any::<u8>(), 0..12),
        2 => prop::collection::vec(any::<u8>(), 0..300),
        1 => prop::collection::vec(any::<u8>(), 65_530..65_545),
    ]
}

fn resource_instance() -> impl Strategy<Value = Tlv> {
    (any::<u16>(), leaf_value()).prop_map(|(id, v)| Tlv::resource_instance(id, v))
}

fn instance_child() -> impl Strategy<Value = Tlv> {
    prop_oneof![
        (any::<u16>(), leaf_value()).prop_map(|(id, v)| Tlv::resource(id, v)),
        (
            any::<u16>(),
            prop::collection::vec(resource_instance(), 0..5)
        )
            .prop_map(|(id, c)| Tlv::multiple_resource(id, c)),
    ]
}

fn top_level() -> impl Strategy<Value = Tlv> {
    prop_oneof![
        (any::<u16>(), prop::collection::vec(instance_child(), 0..6))
            .prop_map(|(id, c)| Tlv::object_instance(id, c)),
        instance_child(),
        resource_instance(),
    ]
}

proptest! {
    #[test]
    fn decode_inverts_encode(tree in prop::collection::vec(top_level(), 0..4)) {
        let bytes = encode(&tree).unwrap();
        prop_assert_eq!(bytes.len(), encoded_len(&tree).unwrap());
        prop_assert_eq!(decode(&bytes).unwrap(), tree);
    }

    /// The fuzz target: arbitrary bytes give a tree or an error, never a panic; whatever decodes
    /// re-encodes to a canonical form that decodes to the same tree.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(data in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(tree) = decode(&data) {
            let canonical = encode(&tree).unwrap();
            prop_assert!(canonical.len() <= data.len());
            prop_assert_eq!(decode(&canonical).unwrap(), tree);
        }
    }

    /// Mutations of valid encodings reach deeper than random bytes: overwrite a few bytes,
    /// then cut the tail; the decoder must still answer without panicking.
    #[test]
    fn decoding_mutated_encodings_never_panics(
        tree in prop::collection::vec(top_level(), 1..3),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = encode(&tree).unwrap();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        if let Ok(decoded) = decode(&bytes) {
            prop_assert_eq!(decode(&encode(&decoded).unwrap()).unwrap(), decoded);
        }
    }

    #[test]
    fn integer_values_round_trip(value in any::<i64>()) {
        prop_assert_eq!(read_int(&encode_int(value)), Ok(value));
    }

    #[test]
    fn float_values_round_trip(value in any::<f64>().prop_filter("not NaN", |v| !v.is_nan())) {
        prop_assert_eq!(read_float(&encode_float(value)).unwrap().to_bits(), value.to_bits());
    }

    #[test]
    fn typed_reads_of_arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..10)) {
        let _ = (read_int(&data), read_unsigned(&data), read_float(&data), read_bool(&data));
        let _ = (read_string(&data), read_objlnk(&data));
    }
}
