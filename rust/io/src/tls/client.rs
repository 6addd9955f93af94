//! The client side of TLS and DTLS: TLS/DTLS 1.2, a PSK or a certificate per connection, the server's certificate
//! not checked (the simulator and Edge Core's upstream link are test and relay tools).
//!
//! A connector holds two OpenSSL contexts, one for PSK clients and one for certificate clients, and each connection
//! brings its own credential: a context costs about 150 µs to build with OpenSSL 3.0 (more than a PSK handshake's
//! share of a client's CPU), and a simulated fleet runs thousands of devices, each its own identity.

use std::sync::OnceLock;

use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::pkey::PKey;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslSession, SslStream,
    SslVerifyMode, SslVersion,
};
use openssl::x509::X509;

use super::session::TlsSession;
use super::{ALPN, CERT_CIPHERS, PSK_CIPHERS};
use crate::dtls::{ffi, DtlsError, DtlsSession, Pipe, MTU};
use crate::psk::MAX_PSK;

/// What a client proves itself with.
pub enum ClientCredential<'a> {
    /// A PSK identity and its key (RFC 4279).
    Psk { identity: &'a [u8], key: &'a [u8] },
    /// A certificate and its private key, PEM (one file may hold both).
    Certificate {
        certificate_pem: &'a [u8],
        key_pem: &'a [u8],
    },
}

/// The PSK a connection offers, attached to its `SSL` for the context's PSK callback.
struct Psk {
    identity: Vec<u8>,
    key: Vec<u8>,
}

fn psk_index() -> Index<Ssl, Psk> {
    static INDEX: OnceLock<Index<Ssl, Psk>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index().expect("an SSL ex_data index"))
}

/// The two contexts of a connector, and the `SSL` of one connection with its credential.
struct Contexts {
    psk: SslContext,
    certificate: SslContext,
}

impl Contexts {
    fn new(method: SslMethod, version: SslVersion, alpn: bool) -> Result<Self, DtlsError> {
        let builder = |ciphers: &str| -> Result<SslContextBuilder, DtlsError> {
            let mut builder = SslContext::builder(method)?;
            builder.set_min_proto_version(Some(version))?;
            builder.set_max_proto_version(Some(version))?;
            builder.set_options(SslOptions::NO_QUERY_MTU); // tickets asked for: a DTLS session resumes
            builder.set_verify(SslVerifyMode::NONE);
            builder.set_cipher_list(ciphers)?;
            if alpn {
                builder.set_alpn_protos(ALPN)?;
            }
            Ok(builder)
        };
        let mut psk = builder(PSK_CIPHERS)?;
        psk.set_psk_client_callback(|ssl, _hint, identity_out, psk_out| {
            let Some(offered) = ssl.ex_data(psk_index()) else {
                return Ok(0);
            };
            // the identity goes out NUL-terminated (SSL_CTX_set_psk_client_callback(3))
            if offered.identity.len() >= identity_out.len() || offered.key.len() > psk_out.len() {
                return Ok(0);
            }
            identity_out[..offered.identity.len()].copy_from_slice(&offered.identity);
            identity_out[offered.identity.len()] = 0;
            psk_out[..offered.key.len()].copy_from_slice(&offered.key);
            Ok(offered.key.len())
        });
        Ok(Contexts {
            psk: psk.build(),
            certificate: builder(CERT_CIPHERS)?.build(),
        })
    }

    fn ssl(&self, credential: &ClientCredential<'_>) -> Result<Ssl, DtlsError> {
        let ssl = match *credential {
            ClientCredential::Psk { identity, key } => {
                if identity.is_empty() || key.is_empty() || key.len() > MAX_PSK {
                    return Err(DtlsError::Psk);
                }
                let mut ssl = Ssl::new(&self.psk)?;
                let (identity, key) = (identity.to_vec(), key.to_vec());
                ssl.set_ex_data(psk_index(), Psk { identity, key });
                ssl
            }
            ClientCredential::Certificate {
                certificate_pem,
                key_pem,
            } => {
                let mut ssl = Ssl::new(&self.certificate)?;
                let certificate = X509::from_pem(certificate_pem)?;
                ssl.set_certificate(&certificate)?;
                let key = PKey::private_key_from_pem(key_pem)?;
                if !certificate.public_key()?.public_eq(&key) {
                    return Err(DtlsError::KeyMismatch);
                }
                ssl.set_private_key(&key)?;
                ssl
            }
        };
        Ok(ssl)
    }
}

/// A TLS 1.2 client; each connection is a [`TlsSession`] in connect state, offering ALPN `coap` (RFC 8323 §4.1).
pub struct TlsConnector {
    contexts: Contexts,
}

impl TlsConnector {
    /// A connector for any number of connections.
    pub fn new() -> Result<Self, DtlsError> {
        Ok(TlsConnector {
            contexts: Contexts::new(SslMethod::tls_client(), SslVersion::TLS1_2, true)?,
        })
    }

    /// A new connection proving itself with `credential`; [`TlsSession::start`] gives its ClientHello.
    pub fn connect(&self, credential: &ClientCredential<'_>) -> Result<TlsSession, DtlsError> {
        self.connect_offering(credential, None)
    }

    /// As [`Self::connect`], offering to resume `offer` ([`TlsSession::resumable`] of an earlier connection of this
    /// connector: the server's ticket, RFC 5077) if given. An offer that does not decode is not made: the handshake
    /// is a full one.
    pub fn connect_offering(
        &self,
        credential: &ClientCredential<'_>,
        offer: Option<&[u8]>,
    ) -> Result<TlsSession, DtlsError> {
        let mut ssl = self.contexts.ssl(credential)?;
        ssl.set_connect_state();
        if let Some(session) = offer.and_then(|der| SslSession::from_der(der).ok()) {
            if ffi::offer_session(&mut ssl, &session).is_err() {
                let _ = ErrorStack::get();
            }
        }
        Ok(TlsSession::new(ssl)?)
    }
}

/// A DTLS 1.2 client; each session is a [`DtlsSession`] in connect state on a datagram pipe, its handshake
/// flights retransmitted on OpenSSL's timer (RFC 6347 §4.2.4, [`DtlsSession::timeout`]).
pub struct DtlsConnector {
    contexts: Contexts,
}

impl DtlsConnector {
    /// A connector for any number of sessions.
    pub fn new() -> Result<Self, DtlsError> {
        Ok(DtlsConnector {
            contexts: Contexts::new(SslMethod::dtls_client(), SslVersion::DTLS1_2, false)?,
        })
    }

    /// A new session proving itself with `credential`, its ClientHello in the datagrams returned; offering to
    /// resume `offer` ([`DtlsSession::resumable`] of an earlier session of this connector) if given. An offer
    /// that does not decode is not made: the handshake is a full one.
    pub fn connect(
        &self,
        credential: &ClientCredential<'_>,
        offer: Option<&[u8]>,
    ) -> Result<(Box<DtlsSession>, Vec<Vec<u8>>), DtlsError> {
        let mut ssl = self.contexts.ssl(credential)?;
        ssl.set_connect_state();
        if let Some(session) = offer.and_then(|der| SslSession::from_der(der).ok()) {
            if ffi::offer_session(&mut ssl, &session).is_err() {
                let _ = ErrorStack::get();
            }
        }
        ssl.set_mtu(MTU)?;
        let stream = SslStream::new(ssl, Pipe::default())?;
        Ok(DtlsSession::start(stream))
    }
}
