//! CBOR codec tests: Anjay's byte traces (its LwM2M CBOR decoder tests and the SenML CBOR read
//! in lwm2m-device-side.md §5), RFC 8428 §6's multiple-datapoint pack, malformed input, the
//! size and depth bounds, and property tests (round trip; arbitrary bytes never panic).

use proptest::prelude::*;

use super::item::{self, Item};
use super::*;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

// ---- LwM2M CBOR (11544): Anjay's decoder test vectors ------------------------------------------

#[test]
fn lwm2m_single_resource_as_id_array_key() {
    // {[13, 26, 1]: 42}
    assert_eq!(
        lwm2m::decode(&hex("a1 83 0d 18 1a 01 18 2a")).unwrap(),
        [(vec![13, 26, 1], Value::Int(42))]
    );
}

#[test]
fn lwm2m_single_resource_nested_maps_and_indefinite_lengths_agree() {
    let nested = hex("a1 0d a1 18 1a a1 01 18 2a"); // {13: {26: {1: 42}}}
    let arrays = hex("a1 81 0d a1 81 18 1a a1 81 01 18 2a"); // {[13]: {[26]: {[1]: 42}}}
    let indefinite = hex("bf 9f 0d ff bf 9f 18 1a ff bf 9f 01 ff 18 2a ff ff ff");
    let expected = [(vec![13, 26, 1], Value::Int(42))];
    for bytes in [nested.clone(), arrays, indefinite] {
        assert_eq!(lwm2m::decode(&bytes).unwrap(), expected);
    }
    assert_eq!(lwm2m::encode(&expected).unwrap(), nested);
}

#[test]
fn lwm2m_two_resources_in_every_key_split() {
    let expected = [
        (vec![13, 26, 1], Value::Int(42)),
        (vec![13, 26, 2], Value::Int(21)),
    ];
    for bytes in [
        "a1 82 0d 18 1a a2 01 18 2a 02 15", // {[13, 26]: {1: 42, 2: 21}}
        "a2 83 0d 18 1a 01 18 2a 83 0d 18 1a 02 15", // {[13, 26, 1]: 42, [13, 26, 2]: 21}
        "a2 82 0d 18 1a a1 01 18 2a 83 0d 18 1a 02 15",
        "a2 83 0d 18 1a 01 18 2a 82 0d 18 1a a1 81 02 15",
    ] {
        assert_eq!(lwm2m::decode(&hex(bytes)).unwrap(), expected, "{bytes}");
    }
}

#[test]
fn lwm2m_indefinite_byte_string_chunks_are_joined() {
    // {[13, 26, 1]: (_ h'0011223344556677', h'8899AABBCCDDEEFF')}
    let bytes = hex("a1 83 0d 18 1a 01 5f 48 0011223344556677 48 8899aabbccddeeff ff");
    assert_eq!(
        lwm2m::decode(&bytes).unwrap(),
        [(
            vec![13, 26, 1],
            Value::Bytes(hex("00112233445566778899aabbccddeeff"))
        )]
    );
}

#[test]
fn lwm2m_decimal_fraction_is_a_float_and_null_has_no_value() {
    // {[13]: {[26]: {[1]: {[2]: 4([-1, 45])}}}} and {[13, 26, 1]: {2: null, 3: 5}}
    let fraction = hex("a1 81 0d a1 81 18 1a a1 81 01 a1 81 02 c4 82 20 18 2d");
    assert_eq!(
        lwm2m::decode(&fraction).unwrap(),
        [(vec![13, 26, 1, 2], Value::Float(4.5))]
    );
    let null = hex("a1 83 0d 18 1a 01 a2 02 f6 03 05");
    assert_eq!(
        lwm2m::decode(&null).unwrap(),
        [(vec![13, 26, 1, 3], Value::Int(5))]
    );
}

#[test]
fn lwm2m_device_instance_with_multiple_resource_and_time_tag() {
    // {3: {0: {0: "Open Mobile Alliance", 1: "Lightweight M2M Client", 2: "345000123",
    //          6: {0: 1, 1: 5}, 9: 100, 13: 1(1367491215)}}} — the Device object of the
    // spec's examples (Core §7.4), built with cbor2 as an independent encoder.
    let bytes = hex(
        "a103a100a600744f70656e204d6f62696c6520416c6c69616e636501764c69676874776569676874204d32\
         4d20436c69656e74026933343530303031323306a2000101050918640dc11a5182428f",
    );
    assert_eq!(
        lwm2m::decode(&bytes).unwrap(),
        [
            (vec![3, 0, 0], text("Open Mobile Alliance")),
            (vec![3, 0, 1], text("Lightweight M2M Client")),
            (vec![3, 0, 2], text("345000123")),
            (vec![3, 0, 6, 0], Value::Int(1)),
            (vec![3, 0, 6, 1], Value::Int(5)),
            (vec![3, 0, 9], Value::Int(100)),
            (vec![3, 0, 13], Value::Int(1_367_491_215)),
        ]
    );
}

#[test]
fn lwm2m_rejects_what_is_not_a_path_document() {
    for (bytes, why) in [
        ("83 01 02 03", "top level array"),
        ("a1 20 01", "negative key"),
        ("a1 19 ffff 01", "reserved id 65535"),
        ("a1 80 01", "empty id array"),
        ("a1 85 01 02 03 04 05 01", "five ids"),
        ("a1 83 01 02 03 a1 04 a1 05 01", "nested past /O/I/R/RI"),
        ("a1 83 01 02 03 82 01 02", "array value"),
        ("a2 83 01 02 03 01 83 01 02 03 02", "same path twice"),
        ("a2 82 01 02 01 83 01 02 03 02", "value and map at once"),
        ("a1 83 01 02 03 c2 41 00", "unknown tag"),
    ] {
        assert!(
            matches!(lwm2m::decode(&hex(bytes)), Err(CborError::Invalid { .. })),
            "{why}"
        );
    }
}

#[test]
fn lwm2m_encode_refuses_bad_paths() {
    assert!(lwm2m::encode(&[(vec![], Value::Int(1))]).is_err());
    assert!(lwm2m::encode(&[(vec![1, 2, 3, 4, 5], Value::Int(1))]).is_err());
    assert!(lwm2m::encode(&[(vec![1, 65535], Value::Int(1))]).is_err());
    assert!(lwm2m::encode(&[(vec![1, 0], Value::Int(1)), (vec![1, 0, 1], Value::Int(2))]).is_err());
    assert!(lwm2m::encode(&[(vec![1, 0], Value::Int(1)), (vec![1, 0], Value::Int(2))]).is_err());
}

// ---- SenML CBOR (112) --------------------------------------------------------------------------

#[test]
fn senml_anjay_temperature_read() {
    // lwm2m-device-side.md §5: Anjay answering GET /3303/0/5700 with Accept 112.
    let bytes = hex("81 a2 21 6c 2f333330332f302f35373030 02 fa 41500000");
    let entries = vec![(String::new(), Value::Float(13.0))];
    assert_eq!(
        senml::decode(&bytes).unwrap(),
        [("/3303/0/5700".to_owned(), Value::Float(13.0))]
    );
    assert_eq!(senml::encode(&entries, "/3303/0/5700"), bytes);
}

#[test]
fn senml_rfc8428_multiple_datapoints_resolve_base_name() {
    // RFC 8428 §5.1.2 / §6: bn, bt, bu, bver, n, u, t, v with integer labels (cbor2-encoded).
    let bytes = hex(
        "87a721781b75726e3a6465763a6f773a3130653230373361303130383030363a22fb41d303a15b0010622361\
         4120050067766f6c7461676501615602fb405e066666666666a3006763757272656e74062402fb3ff3333333\
         333333a3006763757272656e74062302fb3ff4cccccccccccda3006763757272656e74062202fb3ff6666666\
         666666a3006763757272656e74062102fb3ff8000000000000a3006763757272656e74062002fb3ff9999999\
         99999aa2006763757272656e7402fb3ffb333333333333",
    );
    let decoded = senml::decode(&bytes).unwrap();
    assert_eq!(decoded.len(), 7);
    assert_eq!(
        decoded[0],
        (
            "urn:dev:ow:10e2073a0108006:voltage".to_owned(),
            Value::Float(120.1)
        )
    );
    assert_eq!(
        decoded[6],
        (
            "urn:dev:ow:10e2073a0108006:current".to_owned(),
            Value::Float(1.7)
        )
    );
}

#[test]
fn senml_value_kinds_base_value_and_objlnk() {
    // [{-2: "/3/0/", -5: 10, 0: "9", 2: 5}, {0: "1", 3: "sim"}, {0: "2", 4: true},
    //  {0: "3", 8: h'01'}, {0: "4", "vlo": "3:0"}, {-2: "/4/"}]
    let mut out = Vec::new();
    item::encode_into(
        &Item::Array(vec![
            Item::Map(vec![
                (Item::Neg(-2), Item::Text("/3/0/".into())),
                (Item::Neg(-5), Item::Uint(10)),
                (Item::Uint(0), Item::Text("9".into())),
                (Item::Uint(2), Item::Uint(5)),
            ]),
            Item::Map(vec![
                (Item::Uint(0), Item::Text("1".into())),
                (Item::Uint(3), Item::Text("sim".into())),
            ]),
            Item::Map(vec![
                (Item::Uint(0), Item::Text("2".into())),
                (Item::Uint(4), Item::Bool(true)),
            ]),
            Item::Map(vec![
                (Item::Uint(0), Item::Text("3".into())),
                (Item::Uint(8), Item::Bytes(vec![1])),
            ]),
            Item::Map(vec![
                (Item::Uint(0), Item::Text("4".into())),
                (Item::Text("vlo".into()), Item::Text("3:0".into())),
            ]),
            Item::Map(vec![(Item::Neg(-2), Item::Text("/4/".into()))]),
        ]),
        &mut out,
    );
    assert_eq!(
        senml::decode(&out).unwrap(),
        [
            ("/3/0/9".to_owned(), Value::Int(15)),
            ("/3/0/1".to_owned(), text("sim")),
            ("/3/0/2".to_owned(), Value::Bool(true)),
            ("/3/0/3".to_owned(), Value::Bytes(vec![1])),
            ("/3/0/4".to_owned(), Value::ObjLnk("3:0".into())),
        ]
    );
}

#[test]
fn senml_rejects_malformed_packs() {
    for (bytes, why) in [
        ("a1 00 61 31", "top level map"),
        ("81 01", "record not a map"),
        ("81 a1 00 01", "name not text"),
        ("81 a2 02 01 03 61 61", "two values"),
        ("81 a1 04 01", "vb not bool"),
        ("81 a1 08 61 61", "vd not bytes"),
        ("81 a1 62 78 5f 01", "must-understand label x_"),
        ("81 a1 20 18 64", "bver 100"),
    ] {
        assert!(
            matches!(senml::decode(&hex(bytes)), Err(CborError::Invalid { .. })),
            "{why}"
        );
    }
}

// ---- the item layer ----------------------------------------------------------------------------

#[test]
fn malformed_items_are_typed_errors() {
    assert_eq!(item::decode(&hex("")), Err(CborError::Truncated(0)));
    assert_eq!(item::decode(&hex("1a 0000")), Err(CborError::Truncated(1)));
    assert_eq!(
        item::decode(&hex("01 02")),
        Err(CborError::TrailingBytes(1))
    );
    assert_eq!(item::decode(&hex("1c")), Err(CborError::Malformed(0)));
    assert_eq!(item::decode(&hex("ff")), Err(CborError::Malformed(0)));
    assert_eq!(item::decode(&hex("f8 10")), Err(CborError::Malformed(0)));
    assert_eq!(
        item::decode(&hex("5f 61 61 ff")),
        Err(CborError::Malformed(1))
    );
    assert_eq!(
        item::decode(&hex("62 c3 28")),
        Err(CborError::InvalidUtf8(0))
    );
    assert_eq!(
        item::decode(&hex("3b 8000000000000000")),
        Err(CborError::IntegerOutOfRange(0))
    );
    // A huge declared length with no bytes behind it fails before allocating.
    assert_eq!(
        item::decode(&hex("5b ffffffffffffffff")),
        Err(CborError::Truncated(9))
    );
    assert_eq!(
        item::decode(&hex("9b ffffffffffffffff")),
        Err(CborError::Truncated(9))
    );
}

#[test]
fn nesting_and_size_are_bounded() {
    let deep: Vec<u8> = std::iter::repeat_n(0x81, MAX_DEPTH).chain([0x01]).collect();
    assert!(item::decode(&deep).is_ok());
    let too_deep: Vec<u8> = std::iter::repeat_n(0x81, MAX_DEPTH + 1)
        .chain([0x01])
        .collect();
    assert_eq!(item::decode(&too_deep), Err(CborError::TooDeep));
    let tags: Vec<u8> = std::iter::repeat_n(0xc1, 10_000).chain([0x01]).collect();
    assert_eq!(item::decode(&tags), Err(CborError::TooDeep));
    let huge = vec![0u8; MAX_INPUT_LEN + 1];
    assert_eq!(
        lwm2m::decode(&huge),
        Err(CborError::InputTooLarge(MAX_INPUT_LEN + 1))
    );
}

#[test]
fn floats_of_every_width_decode() {
    assert_eq!(item::decode(&hex("f9 3c00")), Ok(Item::Float(1.0)));
    assert_eq!(item::decode(&hex("f9 c400")), Ok(Item::Float(-4.0)));
    assert_eq!(
        item::decode(&hex("f9 0001")),
        Ok(Item::Float(5.960_464_477_539_063e-8))
    );
    assert_eq!(
        item::decode(&hex("f9 7c00")),
        Ok(Item::Float(f64::INFINITY))
    );
    assert_eq!(item::decode(&hex("fa 41500000")), Ok(Item::Float(13.0)));
    assert_eq!(
        item::decode(&hex("fb 3ff199999999999a")),
        Ok(Item::Float(1.1))
    );
    assert_eq!(item::encode(&Item::Float(1.1)), hex("fb 3ff199999999999a"));
    assert_eq!(item::encode(&Item::Float(13.0)), hex("fa 41500000"));
}

// ---- properties --------------------------------------------------------------------------------

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::Int),
        ((i64::MAX as u64 + 1)..=u64::MAX).prop_map(Value::Uint),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::Float),
        any::<bool>().prop_map(Value::Bool),
        ".{0,12}".prop_map(Value::Text),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Value::Bytes),
    ]
}

/// Prefix-free paths of 1-4 small ids, sorted (the order `encode` writes them in).
fn lwm2m_entries() -> impl Strategy<Value = Vec<(Vec<u16>, Value)>> {
    prop::collection::btree_map(prop::collection::vec(0u16..4, 1..=4), value(), 0..12).prop_map(
        |map| {
            let paths: Vec<Vec<u16>> = map.keys().cloned().collect();
            map.into_iter()
                .filter(|(p, _)| !paths.iter().any(|q| q.len() < p.len() && p.starts_with(q)))
                .collect()
        },
    )
}

proptest! {
    #[test]
    fn lwm2m_decode_inverts_encode(entries in lwm2m_entries()) {
        let bytes = lwm2m::encode(&entries).unwrap();
        prop_assert_eq!(lwm2m::decode(&bytes).unwrap(), entries);
    }

    #[test]
    fn senml_decode_inverts_encode(
        entries in prop::collection::vec(("[0-9/]{0,8}", prop_oneof![value(), "[0-9]{1,3}:[0-9]{1,3}".prop_map(Value::ObjLnk)]), 0..8),
        base in "[a-z/]{0,6}",
    ) {
        let bytes = senml::encode(&entries, &base);
        let expected: Vec<_> = entries.iter().map(|(n, v)| (format!("{base}{n}"), v.clone())).collect();
        prop_assert_eq!(senml::decode(&bytes).unwrap(), expected);
    }

    /// The fuzz targets: arbitrary bytes give a value or an error, never a panic; whatever the
    /// item layer decodes re-encodes to bytes that decode to the same item.
    #[test]
    fn decoding_arbitrary_bytes_never_panics(data in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = lwm2m::decode(&data);
        let _ = senml::decode(&data);
        if let Ok(item) = item::decode(&data) {
            if !format!("{item:?}").contains("NaN") {
                prop_assert_eq!(item::decode(&item::encode(&item)).unwrap(), item);
            }
        }
    }

    /// Arbitrary bytes behind a valid prefix reach the deeper decoder paths.
    #[test]
    fn decoding_arbitrary_maps_never_panics(tail in prop::collection::vec(any::<u8>(), 0..128)) {
        let mut lwm2m_doc = hex("a1 83 0d 18 1a");
        lwm2m_doc.extend_from_slice(&tail);
        let _ = lwm2m::decode(&lwm2m_doc);
        let mut senml_doc = hex("81 a2");
        senml_doc.extend_from_slice(&tail);
        let _ = senml::decode(&senml_doc);
    }
}
