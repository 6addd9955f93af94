//! CoAP datagrams from anyone: decoding never panics, and what decodes encodes back to a message that decodes
//! the same.
#![no_main]

use devicehub_codec::coap;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = coap::decode(data) {
        let bytes = coap::encode(&message).expect("a decoded message encodes");
        assert_eq!(coap::decode(&bytes).expect("re-encoded bytes decode"), message);
    }
});
