//! devicehub's hot paths in plain Rust: no Python here, time is always passed in.
//!
//! - [`queue`]: the per-API-key bounded, byte-accounted channel event queue and its batches.
//! - [`tlv`]: the OMA-TLV codec (LwM2M 1.0 §6.4.3).
//! - [`cbor`]: the SenML CBOR (112) and LwM2M CBOR (11544) codecs.
//! - [`dtls`]: the DTLS 1.2 server record layer (OpenSSL on memory pipes), with session resumption.
//! - [`coap`]: the CoAP message codec (RFC 7252, with Observe and Block options).
//! - [`histogram`]: the log-bucket latency histogram of the simulator's report.
//! - [`links`]: the CoRE link format (RFC 6690) of Register and Update payloads.
//! - [`observe_lane`]: the plain UDP listener's steady-state notifications, recognised without Python.
//! - [`request_log`]: the device-request queue's SQLite file and its writer thread (Unix).
//! - [`udp`]: batched UDP sends and receives (`sendmmsg`/`recvmmsg`, Linux only).

pub mod cbor;
pub mod coap;
pub mod dtls;
pub mod histogram;
pub mod links;
pub mod observe_lane;
pub mod queue;
#[cfg(unix)]
pub mod request_log;
pub mod tlv;
#[cfg(target_os = "linux")]
pub mod udp;
