//! The client side of TLS and DTLS: one credential (a PSK or a certificate), TLS/DTLS 1.2, the server's
//! certificate not checked (the simulator and Edge Core's upstream link are test and relay tools).

use openssl::error::ErrorStack;
use openssl::pkey::PKey;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509;

use super::session::TlsSession;
use super::{ALPN, CERT_CIPHERS, PSK_CIPHERS};
use crate::dtls::{DtlsError, DtlsSession, Pipe, MTU};
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

/// A TLS 1.2 client context; each connection is a [`TlsSession`] in connect state.
pub struct TlsConnector {
    context: SslContext,
}

impl TlsConnector {
    /// A client proving itself with `credential`, offering ALPN `coap` (RFC 8323 §4.1).
    pub fn new(credential: &ClientCredential<'_>) -> Result<Self, DtlsError> {
        let mut builder = SslContext::builder(SslMethod::tls_client())?;
        builder.set_min_proto_version(Some(SslVersion::TLS1_2))?;
        builder.set_max_proto_version(Some(SslVersion::TLS1_2))?;
        builder.set_alpn_protos(ALPN)?;
        configure(&mut builder, credential)?;
        Ok(TlsConnector {
            context: builder.build(),
        })
    }

    /// A new connection's session; [`TlsSession::start`] gives its ClientHello.
    pub fn connect(&self) -> Result<TlsSession, DtlsError> {
        let mut ssl = Ssl::new(&self.context)?;
        ssl.set_connect_state();
        Ok(TlsSession::new(ssl)?)
    }
}

/// A DTLS 1.2 client context; each session is a [`DtlsSession`] in connect state on a datagram pipe, its
/// handshake flights retransmitted on OpenSSL's timer (RFC 6347 §4.2.4, [`DtlsSession::timeout`]).
pub struct DtlsConnector {
    context: SslContext,
}

impl DtlsConnector {
    /// A client proving itself with `credential`.
    pub fn new(credential: &ClientCredential<'_>) -> Result<Self, DtlsError> {
        let mut builder = SslContext::builder(SslMethod::dtls_client())?;
        builder.set_min_proto_version(Some(SslVersion::DTLS1_2))?;
        builder.set_max_proto_version(Some(SslVersion::DTLS1_2))?;
        builder.set_options(SslOptions::NO_QUERY_MTU | SslOptions::NO_TICKET);
        configure(&mut builder, credential)?;
        Ok(DtlsConnector {
            context: builder.build(),
        })
    }

    /// A new session, its ClientHello in the datagrams returned.
    pub fn connect(&self) -> Result<(Box<DtlsSession>, Vec<Vec<u8>>), DtlsError> {
        let mut ssl = Ssl::new(&self.context)?;
        ssl.set_connect_state();
        ssl.set_mtu(MTU)?;
        let stream = SslStream::new(ssl, Pipe::default())?;
        Ok(DtlsSession::start(stream))
    }
}

fn configure(
    builder: &mut SslContextBuilder,
    credential: &ClientCredential<'_>,
) -> Result<(), DtlsError> {
    builder.set_verify(SslVerifyMode::NONE);
    match *credential {
        ClientCredential::Psk { identity, key } => {
            if identity.is_empty() || key.is_empty() || key.len() > MAX_PSK {
                return Err(DtlsError::Psk);
            }
            builder.set_cipher_list(PSK_CIPHERS)?;
            let (identity, key) = (identity.to_vec(), key.to_vec());
            builder.set_psk_client_callback(move |_, _hint, identity_out, psk_out| {
                // the identity goes out NUL-terminated (SSL_CTX_set_psk_client_callback(3))
                if identity.len() >= identity_out.len() || key.len() > psk_out.len() {
                    return Err(ErrorStack::get());
                }
                identity_out[..identity.len()].copy_from_slice(&identity);
                identity_out[identity.len()] = 0;
                psk_out[..key.len()].copy_from_slice(&key);
                Ok(key.len())
            });
        }
        ClientCredential::Certificate {
            certificate_pem,
            key_pem,
        } => {
            builder.set_cipher_list(CERT_CIPHERS)?;
            let certificate = X509::from_pem(certificate_pem)?;
            builder.set_certificate(&certificate)?;
            let key = PKey::private_key_from_pem(key_pem)?;
            builder.set_private_key(&key)?;
            builder.check_private_key()?;
        }
    }
    Ok(())
}
