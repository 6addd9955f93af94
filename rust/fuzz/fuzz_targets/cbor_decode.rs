//! CBOR, LwM2M CBOR and SenML CBOR payloads from devices: no decoder panics on any input.
#![no_main]

use devicehub_codec::cbor;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cbor::item::decode(data);
    let _ = cbor::lwm2m::decode(data);
    let _ = cbor::senml::decode(data);
});
