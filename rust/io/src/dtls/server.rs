//! The server's OpenSSL context (suites, certificate, PSK table, cookies, session cache, tickets) and `accept`, which
//! answers a ClientHello without a valid cookie statelessly and makes a session of one with.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use openssl::error::ErrorStack;
use openssl::pkey::PKey;
use openssl::ssl::{
    Ssl, SslContext, SslMethod, SslOptions, SslSession, SslSessionCacheMode, SslSessionRef,
    SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509;

use super::session::DtlsSession;
use super::{cookie, ffi, DtlsError, Pipe, CIPHERS, MAX_DATAGRAM, MTU};
use crate::peer::PskServer;
use crate::psk::PskTable;
use crate::tickets::{self, TicketIssuers, TicketKeys};

/// Cached sessions the caller tagged: session id → (tag, session), so a tag's sessions can be dropped.
type Tagged = Arc<Mutex<HashMap<Vec<u8>, (String, SslSession)>>>;

/// A DTLS 1.2 server: its OpenSSL context (suites, certificate, PSK table, cookies, session cache).
pub struct DtlsServer {
    context: SslContext,
    psks: PskTable,
    tagged: Tagged,
    tickets: TicketKeys,
    issuers: TicketIssuers,
}

/// The PSK table; removing an identity leaves its cached sessions until [`DtlsServer::forget`] (its tickets no longer
/// resume: [`crate::tickets`]).
impl PskServer for DtlsServer {
    fn psks(&self) -> &PskTable {
        &self.psks
    }
}

/// What [`DtlsServer::accept`] made of a datagram from a peer without a session.
pub enum Accepted {
    /// A ClientHello without a valid cookie: send these (the HelloVerifyRequest); nothing is kept.
    HelloVerify(Vec<Vec<u8>>),
    /// A ClientHello with a valid cookie: the peer's session, its handshake under way; send `output`.
    Session(Box<DtlsSession>, Vec<Vec<u8>>),
    /// Not a ClientHello this server answers: drop it.
    Dropped,
}

impl DtlsServer {
    /// A server with this certificate and key (DER; the key PKCS#8 or traditional), keeping at most
    /// `cache_size` sessions for `cache_timeout` seconds each for resumption.
    pub fn new(
        certificate_der: &[u8],
        key_der: &[u8],
        cache_size: u32,
        cache_timeout: u32,
    ) -> Result<Self, DtlsError> {
        let psks = PskTable::default();
        let tagged: Tagged = Arc::default();
        let mut builder = SslContext::builder(SslMethod::dtls())?;
        builder.set_min_proto_version(Some(SslVersion::DTLS1_2))?;
        builder.set_max_proto_version(Some(SslVersion::DTLS1_2))?;
        builder.set_cipher_list(CIPHERS)?;
        let certificate = X509::from_der(certificate_der)?;
        builder.set_certificate(&certificate)?;
        let key = PKey::private_key_from_der(key_der)?;
        builder.set_private_key(&key)?;
        builder.check_private_key()?;
        builder.set_options(SslOptions::COOKIE_EXCHANGE | SslOptions::NO_QUERY_MTU);
        builder.set_session_cache_mode(SslSessionCacheMode::SERVER);
        builder.set_session_cache_size(i32::try_from(cache_size).unwrap_or(i32::MAX));
        ffi::set_session_timeout(&mut builder, cache_timeout);
        // resumption with client certificates requested needs a session id context (else OpenSSL refuses it)
        builder.set_session_id_context(b"devicehub-dtls")?;
        cookie::install(&mut builder)?;
        psks.install(&mut builder);
        let (tickets, issuers) = (TicketKeys::default(), TicketIssuers::default());
        tickets::install(&mut builder, tickets.clone(), psks.clone(), issuers.clone());
        // ask for a certificate (with the ECDHE-ECDSA suites) and take any: the caller judges it and says why
        builder.set_verify_callback(SslVerifyMode::PEER, |_, _| true);
        let evicted = tagged.clone();
        builder.set_remove_session_callback(move |_, session| {
            lock(&evicted).remove(session.id());
        });
        Ok(DtlsServer {
            context: builder.build(),
            psks,
            tagged,
            tickets,
            issuers,
        })
    }

    /// Installs the session-ticket key ring (`keys[0]` encrypts, all decrypt; [`crate::tickets`]); empty: no
    /// tickets.
    pub fn set_ticket_keys(&self, keys: &[&[u8]]) -> Result<(), DtlsError> {
        self.tickets.set(keys).map_err(|_| DtlsError::TicketKey)
    }

    /// The CAs (their DER subject names) whose certificates' tickets may resume: the ones trusted now.
    pub fn set_ticket_issuers(&self, subjects: &[&[u8]]) {
        self.issuers.set(subjects);
    }

    /// How many keys the ticket ring holds.
    pub fn ticket_key_count(&self) -> usize {
        self.tickets.len()
    }

    /// Drops the cached sessions tagged `tag`: they can no longer be resumed. Returns how many.
    pub fn forget(&self, tag: &str) -> usize {
        let sessions: Vec<SslSession> = lock(&self.tagged)
            .values()
            .filter(|(each, _)| each == tag)
            .map(|(_, session)| session.clone())
            .collect();
        for session in &sessions {
            self.uncache(session);
        }
        sessions.len()
    }

    /// Tags a cached session with the credential that proved it, for [`Self::forget`].
    pub(super) fn tag(&self, session: &SslSessionRef, tag: &str) {
        if !session.id().is_empty() {
            lock(&self.tagged).insert(session.id().to_vec(), (tag.to_owned(), session.to_owned()));
        }
    }

    /// Drops a session from the cache and its tag: it cannot be resumed.
    pub(super) fn uncache(&self, session: &SslSessionRef) {
        ffi::remove_session(&self.context, session);
        lock(&self.tagged).remove(session.id()); // the callback did it too, unless it was already evicted
    }

    /// How many cached sessions carry a tag.
    pub fn tagged_count(&self) -> usize {
        lock(&self.tagged).len()
    }

    /// Takes a datagram from `peer` (its address, as bytes the cookie binds) that has no session.
    pub fn accept(&self, peer: &[u8], datagram: &[u8]) -> Accepted {
        if datagram.len() > MAX_DATAGRAM || !is_client_hello(datagram) {
            return Accepted::Dropped;
        }
        let Ok(stream) = self.listen(peer, datagram) else {
            return Accepted::Dropped;
        };
        match stream {
            Listened::Verify(output) if output.is_empty() => Accepted::Dropped,
            Listened::Verify(output) => Accepted::HelloVerify(output),
            Listened::Cookie(stream) => {
                let (session, output) = DtlsSession::start(stream);
                Accepted::Session(session, output)
            }
        }
    }

    fn listen(&self, peer: &[u8], datagram: &[u8]) -> Result<Listened, ErrorStack> {
        let mut ssl = Ssl::new(&self.context)?;
        ssl.set_accept_state();
        ssl.set_mtu(MTU)?;
        cookie::bind_peer(&mut ssl, peer);
        let mut pipe = Pipe::default();
        pipe.inbox.push_back(datagram.to_vec());
        let mut stream = SslStream::new(ssl, pipe)?;
        if ffi::listen(stream.ssl())? {
            Ok(Listened::Cookie(stream))
        } else {
            let _ = ErrorStack::get(); // a malformed hello leaves errors queued on this thread: clear them
            Ok(Listened::Verify(std::mem::take(
                &mut stream.get_mut().outbox,
            )))
        }
    }
}

enum Listened {
    Verify(Vec<Vec<u8>>),
    Cookie(SslStream<Pipe>),
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A DTLS handshake record of epoch 0 carrying a ClientHello (RFC 6347 §4.1, §4.2.2).
pub fn is_client_hello(data: &[u8]) -> bool {
    data.len() > 25 && data[0] == 22 && data[3..5] == [0, 0] && data[13] == 1
}
