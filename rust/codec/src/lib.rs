//! devicehub's pure codecs and rules in plain Rust: no Python, no I/O, no native library; time is always passed in.
//! What devices and the network can reach is decoded here, so the fuzz targets and proptests need nothing else.
//!
//! - [`queue`]: the per-API-key bounded, byte-accounted channel event queue and its batches.
//! - [`tlv`]: the OMA-TLV codec (LwM2M 1.0 §6.4.3).
//! - [`cbor`]: the SenML CBOR (112) and LwM2M CBOR (11544) codecs.
//! - [`coap`]: the CoAP message codec (RFC 7252, with Observe and Block options).
//! - [`histogram`]: the log-bucket latency histogram of the simulator's report.
//! - [`links`]: the CoRE link format (RFC 6690) of Register and Update payloads.
//! - [`observe_lane`]: the plain UDP listener's steady-state notifications, recognised without Python.
//! - [`observe_order`]: the order of one observation's notifications (RFC 7641 §3.4), the one freshness rule.

pub mod cbor;
pub mod coap;
pub mod histogram;
pub mod links;
pub mod observe_lane;
pub mod observe_order;
pub mod queue;
pub mod tlv;
