//! The DTLS 1.2 server record layer (issue 13 #1): OpenSSL sessions on in-memory datagram pipes, no sockets.
//!
//! The caller owns the UDP socket: it hands each datagram from a peer to [`DtlsServer::accept`] (no session yet)
//! or to that peer's [`DtlsSession::feed`], and sends the datagrams they give back. What this module adds to
//! OpenSSL:
//! - stateless HelloVerifyRequest cookies: `accept` runs `DTLSv1_listen` on a throw-away `SSL`, so a ClientHello
//!   without a valid cookie (an HMAC-SHA256 of the peer's address under a per-server secret) is answered and
//!   forgotten; only a hello with a valid cookie makes a session (RFC 6347 §4.2.1);
//! - a PSK table the caller sets and removes entries in, consulted by OpenSSL's PSK callback;
//! - client certificates requested but accepted by OpenSSL whatever their chain (it still checks the
//!   CertificateVerify signature): the caller decides from the DER ([`DtlsSession::peer_certificate`]);
//! - a server-side session cache (session IDs) whose entries the caller tags with the credential that proved them
//!   ([`DtlsSession::remember`]), so that revoking the credential drops them ([`DtlsServer::forget`]) and the next
//!   offer of such a session gets a full handshake;
//! - session tickets (RFC 5077) under a key ring the caller shares between nodes ([`DtlsServer::set_ticket_keys`],
//!   [`crate::tickets`]): any node resumes; a PSK ticket only while its identity keeps the key it was made with;
//! - a handshake whose Finished does not verify (wrong PSK) fails at once: DTLS drops a record that does not
//!   decrypt without a word (RFC 6347 §4.1.2.7), which would leave the handshake to time out unexplained.
//!
//! Its parts: `server` (the context and `accept`), `session` (one peer's handshake and records), `cookie`,
//! `pipe` (the memory BIO), and `ffi`, the OpenSSL calls the `openssl` crate does not bind safely: every `unsafe`
//! block of the engine is there (the TLS engine, `crate::tls`, and the DTLS client use it too).
//!
//! The client side ([`crate::tls::DtlsConnector`]) makes a [`DtlsSession`] in connect state on the same pipe.

use openssl::error::ErrorStack;

use crate::psk::MAX_PSK;

mod cookie;
pub(crate) mod ffi;
mod pipe;
mod server;
mod session;

#[cfg(test)]
pub(crate) mod tests;

pub use crate::peer::{Peer, PskServer};
pub use pipe::Pipe;
pub use server::{is_client_hello, Accepted, DtlsServer};
pub use session::{DtlsSession, Fed};

/// The LwM2M 1.1 Transport §5.2 suites, in OpenSSL's names.
pub const CIPHERS: &str =
    "PSK-AES128-CCM8:PSK-AES128-CBC-SHA256:ECDHE-ECDSA-AES128-CCM8:ECDHE-ECDSA-AES128-GCM-SHA256";
/// The largest datagram taken in: a full record (2^14 plaintext, RFC 6347 §4.1) and its expansion.
pub const MAX_DATAGRAM: usize = 16_384 + 2_048;
/// The largest plaintext one `send` takes (one record).
pub const MAX_PLAINTEXT: usize = 16_384;
pub(crate) const MTU: u32 = 1_400;

/// What went wrong setting a server up.
#[derive(Debug, thiserror::Error)]
pub enum DtlsError {
    #[error("DTLS set-up: {0}")]
    Setup(#[from] ErrorStack),
    #[error("a PSK is at most {MAX_PSK} bytes and its identity is not empty")]
    Psk,
    #[error("a DTLS record carries at most {MAX_PLAINTEXT} bytes")]
    TooLarge,
    #[error("a ticket key is 80 bytes (name, HMAC key, AES key), its name unique in the ring")]
    TicketKey,
    #[error("the private key does not match the certificate")]
    KeyMismatch,
}
