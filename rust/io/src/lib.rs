//! devicehub's I/O in plain Rust: no Python here; the native libraries (OpenSSL, SQLite) stay in this crate, apart
//! from the pure codecs of `devicehub-codec`.
//!
//! - [`dtls`]: the DTLS 1.2 server record layer (OpenSSL on memory pipes), with session resumption.
//! - [`tls`]: TLS 1.2 over TCP on the same engine (server and client), and the DTLS client.
//! - [`psk`]: the PSK table both servers look identities up in.
//! - [`request_log`]: the device-request queue's SQLite file and its writer thread (Unix).
//! - [`udp`]: batched UDP sends and receives (`sendmmsg`/`recvmmsg`, Linux only).

pub mod dtls;
pub mod peer;
pub mod psk;
#[cfg(unix)]
pub mod request_log;
pub mod tickets;
pub mod tls;
#[cfg(target_os = "linux")]
pub mod udp;
