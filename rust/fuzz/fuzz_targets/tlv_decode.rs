//! OMA-TLV payloads from devices: decoding never panics, and a decoded tree encodes and decodes to itself.
#![no_main]

use devicehub_codec::tlv;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(tree) = tlv::decode(data) {
        let bytes = tlv::encode(&tree).expect("a decoded tree encodes");
        assert_eq!(tlv::decode(&bytes).expect("re-encoded bytes decode"), tree);
    }
});
