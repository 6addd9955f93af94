//! The TLS server's OpenSSL context: TLS 1.2 only, the LwM2M suites, its certificate, the PSK table, any client
//! certificate requested, ALPN `coap`, resumption by session tickets only (`crate::tickets`: no per-connection
//! state kept), idle buffers released.

use openssl::pkey::PKey;
use openssl::ssl::{
    select_next_proto, AlpnError, Ssl, SslContext, SslMethod, SslMode, SslOptions,
    SslSessionCacheMode, SslVerifyMode, SslVersion,
};
use openssl::x509::X509;

use super::session::TlsSession;
use super::ALPN;
use crate::dtls::{DtlsError, CIPHERS};
use crate::peer::PskServer;
use crate::psk::PskTable;
use crate::tickets::{self, TicketIssuers, TicketKeys};

/// A TLS 1.2 server context; each accepted connection is a [`TlsSession`].
pub struct TlsServer {
    context: SslContext,
    psks: PskTable,
    tickets: TicketKeys,
    issuers: TicketIssuers,
}

impl TlsServer {
    /// A server with this certificate and key (DER; the key PKCS#8 or traditional).
    pub fn new(certificate_der: &[u8], key_der: &[u8]) -> Result<Self, DtlsError> {
        let psks = PskTable::default();
        let mut builder = SslContext::builder(SslMethod::tls_server())?;
        builder.set_min_proto_version(Some(SslVersion::TLS1_2))?;
        builder.set_max_proto_version(Some(SslVersion::TLS1_2))?;
        builder.set_cipher_list(CIPHERS)?;
        let certificate = X509::from_der(certificate_der)?;
        builder.set_certificate(&certificate)?;
        let key = PKey::private_key_from_der(key_der)?;
        builder.set_private_key(&key)?;
        builder.check_private_key()?;
        builder.set_options(SslOptions::NO_RENEGOTIATION);
        builder.set_session_cache_mode(SslSessionCacheMode::OFF); // no session IDs: tickets resume (issue 31 #5)
        builder.set_session_id_context(b"devicehub-tls")?; // resumption with a client certificate requested needs one
                                                           // an idle connection keeps no 16 KiB+ record buffers (TLS only; DTLS frees them by hand, dtls/session.rs)
        builder.set_mode(SslMode::RELEASE_BUFFERS);
        psks.install(&mut builder);
        let (tickets, issuers) = (TicketKeys::default(), TicketIssuers::default());
        tickets::install(&mut builder, tickets.clone(), psks.clone(), issuers.clone());
        // ask for a certificate (with the ECDHE-ECDSA suites) and take any: the caller judges it and says why
        builder.set_verify_callback(SslVerifyMode::PEER, |_, _| true);
        // RFC 8323 §4.1: `coap` is the protocol; a client offering only others is refused, one offering none served
        builder.set_alpn_select_callback(|_, offered| {
            select_next_proto(ALPN, offered).ok_or(AlpnError::ALERT_FATAL)
        });
        Ok(TlsServer {
            context: builder.build(),
            psks,
            tickets,
            issuers,
        })
    }

    /// Installs the session-ticket key ring, as [`crate::dtls::DtlsServer::set_ticket_keys`]; empty: no tickets.
    pub fn set_ticket_keys(&self, keys: &[&[u8]]) -> Result<(), DtlsError> {
        self.tickets.set(keys).map_err(|_| DtlsError::TicketKey)
    }

    /// The CAs (their DER subject names) whose certificates' tickets may resume: the ones trusted now.
    pub fn set_ticket_issuers(&self, subjects: &[&[u8]]) {
        self.issuers.set(subjects);
    }

    /// A new connection's session, in accept state: it waits for the ClientHello.
    pub fn accept(&self) -> Result<TlsSession, DtlsError> {
        let mut ssl = Ssl::new(&self.context)?;
        ssl.set_accept_state();
        Ok(TlsSession::new(ssl)?)
    }
}

impl PskServer for TlsServer {
    fn psks(&self) -> &PskTable {
        &self.psks
    }
}
