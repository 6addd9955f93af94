//! TLS 1.2 over TCP for CoAP (`coaps+tcp://`, RFC 8323 §2, §8.2) on in-memory byte pipes, and the client side of
//! both TLS and DTLS: the DTLS server's OpenSSL engine (`crate::dtls`), with a stream method.
//!
//! The caller owns the TCP connection (or, for a DTLS client, the UDP socket): it feeds each chunk received to the
//! session and sends the bytes it gives back. The server ([`TlsServer`]) offers the suites of the DTLS server (LwM2M
//! 1.1 Transport §5.3 names the §5.2 ones), looks PSK identities up in a table the caller keeps
//! ([`crate::psk::PskTable`]), requests a client certificate and accepts any chain (the caller judges the DER, as
//! for DTLS), selects ALPN `coap` (RFC 8323 §4.1), keeps no session cache but resumes by session tickets under
//! the DTLS server's shared key ring (`crate::tickets`, issue 31 #5), and frees an idle connection's record buffers (`SSL_MODE_RELEASE_BUFFERS`).
//! The clients ([`TlsConnector`], [`DtlsConnector`]) hold one PSK or one certificate and do not check the server's
//! certificate: they serve the simulator and Edge Core's upstream link, test and relay tools.

mod client;
mod pipe;
mod server;
mod session;

#[cfg(test)]
mod tests;

pub use crate::peer::{Peer, PskServer};
pub use client::{ClientCredential, DtlsConnector, TlsConnector};
pub use pipe::StreamPipe;
pub use server::TlsServer;
pub use session::{TlsFed, TlsSession};

/// ALPN's wire form of the one protocol offered and selected: `coap` (RFC 8323 §4.1).
const ALPN: &[u8] = b"\x04coap";
/// The PSK suites of LwM2M 1.1 Transport §5.2, what a PSK client offers.
const PSK_CIPHERS: &str = "PSK-AES128-CCM8:PSK-AES128-CBC-SHA256";
/// The certificate suites, what a certificate client offers.
const CERT_CIPHERS: &str = "ECDHE-ECDSA-AES128-CCM8:ECDHE-ECDSA-AES128-GCM-SHA256";
