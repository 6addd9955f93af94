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
//! - a server-side session cache (session IDs, no tickets: a ticket could not be withdrawn) whose entries the
//!   caller tags with the credential that proved them ([`DtlsSession::remember`]), so that revoking the credential
//!   drops them ([`DtlsServer::forget`]) and the next offer of such a session gets a full handshake;
//! - a handshake whose Finished does not verify (wrong PSK) fails at once: DTLS drops a record that does not
//!   decrypt without a word (RFC 6347 §4.1.2.7), which would leave the handshake to time out unexplained.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use foreign_types::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::hash::MessageDigest;
use openssl::memcmp;
use openssl::pkey::PKey;
use openssl::sign::Signer;
use openssl::ssl::{
    ErrorCode, ShutdownState, Ssl, SslContext, SslMethod, SslOptions, SslSession,
    SslSessionCacheMode, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509;

/// The LwM2M 1.1 Transport §5.2 suites, in OpenSSL's names.
pub const CIPHERS: &str =
    "PSK-AES128-CCM8:PSK-AES128-CBC-SHA256:ECDHE-ECDSA-AES128-CCM8:ECDHE-ECDSA-AES128-GCM-SHA256";
/// The largest datagram taken in: a full record (2^14 plaintext, RFC 6347 §4.1) and its expansion.
pub const MAX_DATAGRAM: usize = 16_384 + 2_048;
/// The largest plaintext one `send` takes (one record).
pub const MAX_PLAINTEXT: usize = 16_384;
const MTU: u32 = 1_400;
const MAX_PSK: usize = 64; // 512 bits, the largest key Pelion's API accepts
/// `SSL_ctrl` command behind `DTLSv1_handle_timeout` (a macro in ssl.h, not bound by openssl-sys).
const DTLS_CTRL_HANDLE_TIMEOUT: i32 = 74;

extern "C" {
    // ssl.h / bio.h; openssl-sys links libssl and libcrypto but does not declare these
    fn DTLSv1_listen(ssl: *mut openssl_sys::SSL, client: *mut c_void) -> i32;
    fn BIO_ADDR_new() -> *mut c_void;
    fn BIO_ADDR_free(addr: *mut c_void);
    fn SSL_alloc_buffers(ssl: *mut openssl_sys::SSL) -> std::os::raw::c_int;
    fn SSL_free_buffers(ssl: *mut openssl_sys::SSL) -> std::os::raw::c_int;
    fn SSL_CTX_set_timeout(
        ctx: *mut openssl_sys::SSL_CTX,
        seconds: std::os::raw::c_long,
    ) -> std::os::raw::c_long;
}

/// What went wrong setting a server up.
#[derive(Debug, thiserror::Error)]
pub enum DtlsError {
    #[error("DTLS set-up: {0}")]
    Setup(#[from] ErrorStack),
    #[error("a PSK is at most {MAX_PSK} bytes and its identity is not empty")]
    Psk,
    #[error("a DTLS record carries at most {MAX_PLAINTEXT} bytes")]
    TooLarge,
}

/// One end of a datagram pipe: each write is one datagram out, each read takes one datagram in or would block.
/// Public for tests and benchmarks, whose OpenSSL clients run on one too.
#[derive(Default)]
pub struct Pipe {
    /// Datagrams to be read, oldest first.
    pub inbox: VecDeque<Vec<u8>>,
    /// Datagrams written.
    pub outbox: Vec<Vec<u8>>,
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inbox.pop_front() {
            Some(datagram) => {
                let n = datagram.len().min(buf.len()); // longer than the buffer: truncated, as UDP does
                buf[..n].copy_from_slice(&datagram[..n]);
                Ok(n)
            }
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outbox.push(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The peer address a cookie binds, attached to each `SSL` for the cookie callbacks.
struct Peer(Vec<u8>);

fn peer_index() -> openssl::ex_data::Index<Ssl, Peer> {
    static INDEX: OnceLock<openssl::ex_data::Index<Ssl, Peer>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index().expect("an SSL ex_data index"))
}

type Psks = Arc<RwLock<HashMap<Vec<u8>, Vec<u8>>>>;
/// Cached sessions the caller tagged: session id → (tag, session), so a tag's sessions can be dropped.
type Tagged = Arc<Mutex<HashMap<Vec<u8>, (String, SslSession)>>>;

/// A DTLS 1.2 server: its OpenSSL context (suites, certificate, PSK table, cookies, session cache).
pub struct DtlsServer {
    context: SslContext,
    psks: Psks,
    tagged: Tagged,
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

/// What one datagram fed to a session gave.
#[derive(Default, Debug)]
pub struct Fed {
    /// Decrypted application records, in order.
    pub records: Vec<Vec<u8>>,
    /// Datagrams to send to the peer (handshake flights, retransmissions, alerts).
    pub output: Vec<Vec<u8>>,
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
        let psks: Psks = Arc::default();
        let tagged: Tagged = Arc::default();
        let mut secret = [0u8; 32];
        openssl::rand::rand_bytes(&mut secret)?;
        let secret = PKey::hmac(&secret)?;
        let mut builder = SslContext::builder(SslMethod::dtls())?;
        builder.set_min_proto_version(Some(SslVersion::DTLS1_2))?;
        builder.set_max_proto_version(Some(SslVersion::DTLS1_2))?;
        builder.set_cipher_list(CIPHERS)?;
        let certificate = X509::from_der(certificate_der)?;
        builder.set_certificate(&certificate)?;
        let key = PKey::private_key_from_der(key_der)?;
        builder.set_private_key(&key)?;
        builder.check_private_key()?;
        builder.set_options(
            SslOptions::COOKIE_EXCHANGE | SslOptions::NO_TICKET | SslOptions::NO_QUERY_MTU,
        );
        builder.set_session_cache_mode(SslSessionCacheMode::SERVER);
        builder.set_session_cache_size(i32::try_from(cache_size).unwrap_or(i32::MAX));
        // SAFETY: a plain setter on the context being built
        unsafe {
            SSL_CTX_set_timeout(builder.as_ptr(), libc_long(cache_timeout));
        }
        // resumption with client certificates requested needs a session id context (else OpenSSL refuses it)
        builder.set_session_id_context(b"devicehub-dtls")?;
        let cookie_secret = secret.clone();
        builder.set_cookie_generate_cb(move |ssl, out| {
            let mac = cookie(&cookie_secret, ssl)?;
            out[..mac.len()].copy_from_slice(&mac);
            Ok(mac.len())
        });
        builder.set_cookie_verify_cb(move |ssl, offered| {
            cookie(&secret, ssl)
                .is_ok_and(|mac| offered.len() == mac.len() && memcmp::eq(offered, &mac))
        });
        let table = psks.clone();
        builder.set_psk_server_callback(move |_, identity, psk| {
            let Some(identity) = identity else {
                return Ok(0);
            };
            let table = table
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match table.get(identity) {
                Some(key) if key.len() <= psk.len() => {
                    psk[..key.len()].copy_from_slice(key);
                    Ok(key.len())
                }
                _ => Ok(0), // unknown identity: OpenSSL sends the unknown_psk_identity alert
            }
        });
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
        })
    }

    /// Sets the key of a PSK identity (a new one, or a new key).
    pub fn set_psk(&self, identity: &[u8], key: &[u8]) -> Result<(), DtlsError> {
        if identity.is_empty() || key.is_empty() || key.len() > MAX_PSK {
            return Err(DtlsError::Psk);
        }
        let mut table = self.psks.write().unwrap_or_else(|p| p.into_inner());
        table.insert(identity.to_vec(), key.to_vec());
        Ok(())
    }

    /// Removes a PSK identity; true if it was there. Its cached sessions stay until [`Self::forget`].
    pub fn remove_psk(&self, identity: &[u8]) -> bool {
        let mut table = self.psks.write().unwrap_or_else(|p| p.into_inner());
        table.remove(identity).is_some()
    }

    /// How many PSK identities the table holds.
    pub fn psk_count(&self) -> usize {
        self.psks.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Drops the cached sessions tagged `tag`: they can no longer be resumed. Returns how many.
    pub fn forget(&self, tag: &str) -> usize {
        let sessions: Vec<SslSession> = lock(&self.tagged)
            .values()
            .filter(|(each, _)| each == tag)
            .map(|(_, session)| session.clone())
            .collect();
        for session in &sessions {
            // SAFETY: the session came from this context's cache (a session of another context is not found)
            unsafe {
                self.context.remove_session(session);
            }
            lock(&self.tagged).remove(session.id()); // the callback did it too, unless it was already evicted
        }
        sessions.len()
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
                let mut session = Box::new(DtlsSession {
                    stream,
                    established: false,
                    failure: None,
                    closed: false,
                });
                let fed = session.handshake(false);
                Accepted::Session(session, fed.output)
            }
        }
    }

    fn listen(&self, peer: &[u8], datagram: &[u8]) -> Result<Listened, ErrorStack> {
        let mut ssl = Ssl::new(&self.context)?;
        ssl.set_accept_state();
        ssl.set_mtu(MTU)?;
        ssl.set_ex_data(peer_index(), Peer(peer.to_vec()));
        let mut pipe = Pipe::default();
        pipe.inbox.push_back(datagram.to_vec());
        let mut stream = SslStream::new(ssl, pipe)?;
        // SAFETY: the SSL is valid and has its BIOs (SslStream::new set them); the address is ours and freed after
        let listened = unsafe {
            let address = BIO_ADDR_new();
            if address.is_null() {
                return Err(ErrorStack::get());
            }
            let listened = DTLSv1_listen(stream.ssl().as_ptr(), address);
            BIO_ADDR_free(address);
            listened
        };
        if listened > 0 {
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

/// One peer's DTLS session: its handshake, then its records.
pub struct DtlsSession {
    stream: SslStream<Pipe>,
    established: bool,
    failure: Option<String>,
    closed: bool,
}

impl DtlsSession {
    /// Takes one datagram from the peer: handshake progress, or the application records it carries.
    /// After it, check [`Self::established`], [`Self::failure`] (the handshake failed: the alert is in the
    /// output) and [`Self::closed`] (close_notify or a fatal alert from the peer).
    pub fn feed(&mut self, datagram: &[u8]) -> Fed {
        // an empty datagram would read as end of file
        if datagram.is_empty()
            || datagram.len() > MAX_DATAGRAM
            || self.failure.is_some()
            || self.closed
        {
            return Fed::default();
        }
        self.stream.get_mut().inbox.push_back(datagram.to_vec());
        if self.established {
            let mut fed = Fed::default();
            if self.acquire() {
                self.read(&mut fed); // may write: a close_notify is answered, a late handshake flight met
                self.release();
            }
            fed.output = std::mem::take(&mut self.stream.get_mut().outbox);
            return fed;
        }
        self.handshake(encrypted_handshake(datagram))
    }

    fn handshake(&mut self, encrypted: bool) -> Fed {
        let mut fed = Fed::default();
        match self.stream.do_handshake() {
            Ok(()) => {
                self.established = true;
                self.read(&mut fed);
                self.release();
            }
            Err(error) if error.code() == ErrorCode::WANT_READ => {
                // an encrypted handshake record after the peer's ChangeCipherSpec is its Finished: had it
                // decrypted and verified, the handshake would be over; DTLS dropped it silently instead
                if encrypted && self.stream.ssl().state_string() == "TRCCS" {
                    self.failure = Some("the peer's Finished did not verify".into());
                    let _ = self.stream.shutdown(); // nothing to tell a peer whose keys differ: just stop
                }
            }
            Err(error) => {
                self.failure = Some(
                    error
                        .ssl_error()
                        .and_then(|stack| stack.errors().first())
                        .and_then(|first| first.reason().map(str::to_owned))
                        .unwrap_or_else(|| error.to_string()),
                );
                let _ = ErrorStack::get();
            }
        }
        fed.output = std::mem::take(&mut self.stream.get_mut().outbox);
        fed
    }

    fn read(&mut self, fed: &mut Fed) {
        // not zeroed: 16 KiB of memset per datagram would cost more than the record's decryption
        let mut buffer = [MaybeUninit::<u8>::uninit(); MAX_PLAINTEXT];
        loop {
            match self.stream.ssl_read_uninit(&mut buffer) {
                Ok(0) => {}
                Ok(n) => {
                    // SAFETY: OpenSSL wrote the first `n` bytes
                    let record =
                        unsafe { std::slice::from_raw_parts(buffer.as_ptr().cast::<u8>(), n) };
                    fed.records.push(record.to_vec());
                    continue;
                }
                Err(error) if error.code() == ErrorCode::WANT_READ => {}
                Err(error) => {
                    self.closed = true;
                    if error.code() == ErrorCode::ZERO_RETURN {
                        let _ = self.stream.shutdown(); // close_notify answered (RFC 5246 §7.2.1)
                    }
                    let _ = ErrorStack::get();
                }
            }
            return;
        }
    }

    /// Encrypts `data` as one record; the datagrams to send.
    pub fn send(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, DtlsError> {
        if data.len() > MAX_PLAINTEXT {
            return Err(DtlsError::TooLarge);
        }
        if self.established && !self.closed && !data.is_empty() && self.acquire() {
            if self.stream.ssl_write(data).is_err() {
                self.closed = true;
                let _ = ErrorStack::get();
            }
            self.release();
        }
        Ok(std::mem::take(&mut self.stream.get_mut().outbox))
    }

    /// Gives an established session its record layer's read and write buffers back, for one operation; false (the
    /// session closed) if they cannot be allocated. Between operations an established session keeps none (issue
    /// 28 #4): they are 16 KiB and more each, most of an idle session's memory, and `SSL_MODE_RELEASE_BUFFERS` frees
    /// them for TLS only. The read buffer is allocated again on demand, but OpenSSL 3.0's DTLS write path
    /// (`do_dtls1_write`) writes into the write buffer without checking it is there: `SSL_alloc_buffers` must come
    /// first, or the write is through a null pointer.
    fn acquire(&mut self) -> bool {
        // SAFETY: a valid SSL; buffers already there are kept
        let allocated = unsafe { SSL_alloc_buffers(self.stream.ssl().as_ptr()) } == 1;
        if !allocated {
            self.closed = true;
            let _ = ErrorStack::get();
        }
        allocated
    }

    /// Frees the buffers `acquire` gave, unless a record is still buffered in either (`SSL_free_buffers` then
    /// declines and they stay until the next operation's end).
    fn release(&mut self) {
        // SAFETY: a valid SSL, with no borrow of its buffers outstanding
        unsafe {
            SSL_free_buffers(self.stream.ssl().as_ptr());
        }
    }

    /// Sends close_notify (when established); the datagrams to send.
    pub fn shutdown(&mut self) -> Vec<Vec<u8>> {
        if self.established && !self.closed && self.acquire() {
            let _ = self.stream.shutdown();
            let _ = ErrorStack::get();
            self.closed = true;
        }
        std::mem::take(&mut self.stream.get_mut().outbox)
    }

    /// Retransmits the last flight if OpenSSL's handshake timer ran out; the datagrams to send.
    pub fn handle_timeout(&mut self) -> Vec<Vec<u8>> {
        if !self.established && self.failure.is_none() {
            // SAFETY: DTLSv1_handle_timeout on a valid SSL
            unsafe {
                openssl_sys::SSL_ctrl(
                    self.stream.ssl().as_ptr(),
                    DTLS_CTRL_HANDLE_TIMEOUT,
                    0,
                    std::ptr::null_mut(),
                );
            }
            let _ = ErrorStack::get();
        }
        std::mem::take(&mut self.stream.get_mut().outbox)
    }

    /// The handshake is over (full or abbreviated).
    pub fn established(&self) -> bool {
        self.established
    }

    /// Why the handshake failed, once it has.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The peer closed the session (close_notify or fatal alert), or it was shut down.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// This session resumed a cached one (abbreviated handshake).
    pub fn session_reused(&self) -> bool {
        self.stream.ssl().session_reused()
    }

    /// The negotiated suite's IANA name (`TLS_PSK_WITH_AES_128_CCM_8`).
    pub fn cipher(&self) -> Option<&'static str> {
        self.stream
            .ssl()
            .current_cipher()
            .and_then(|cipher| cipher.standard_name())
    }

    /// The PSK identity the peer offered (also during a failed handshake), or of the resumed session.
    pub fn psk_identity(&self) -> Option<&[u8]> {
        self.stream.ssl().psk_identity()
    }

    /// The peer's certificate as DER (kept in the session: a resumed session has it too).
    pub fn peer_certificate(&self) -> Option<Vec<u8>> {
        self.stream
            .ssl()
            .peer_certificate()
            .and_then(|certificate| certificate.to_der().ok())
    }

    /// Tags this session's cache entry with the credential that proved it, for [`DtlsServer::forget`].
    pub fn remember(&self, server: &DtlsServer, tag: &str) {
        if let Some(session) = self.stream.ssl().session() {
            if !session.id().is_empty() {
                lock(&server.tagged)
                    .insert(session.id().to_vec(), (tag.to_owned(), session.to_owned()));
            }
        }
    }

    /// Drops this session from the cache (the caller refused its identity): it cannot be resumed.
    pub fn discard(&self, server: &DtlsServer) {
        if let Some(session) = self.stream.ssl().session() {
            // SAFETY: a session of this server's context (another context's is simply not found)
            unsafe {
                server.context.remove_session(session);
            }
            lock(&server.tagged).remove(session.id());
        }
    }
}

impl Drop for DtlsSession {
    /// OpenSSL drops a session from the cache when its `SSL` is freed without a close_notify sent; a session
    /// that ended without failing (the peer went quiet, or the caller let it go) stays resumable: only
    /// [`DtlsSession::discard`], [`DtlsServer::forget`], a fatal alert, eviction or time-out remove it.
    fn drop(&mut self) {
        if self.established && self.failure.is_none() {
            self.stream
                .set_shutdown(ShutdownState::SENT | ShutdownState::RECEIVED);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn libc_long(value: u32) -> std::os::raw::c_long {
    std::os::raw::c_long::from(value)
}

fn cookie(
    secret: &PKey<openssl::pkey::Private>,
    ssl: &openssl::ssl::SslRef,
) -> Result<Vec<u8>, ErrorStack> {
    let peer = ssl
        .ex_data(peer_index())
        .map_or(&[][..], |peer| &peer.0[..]);
    let mut signer = Signer::new(MessageDigest::sha256(), secret)?;
    signer.update(peer)?;
    signer.sign_to_vec()
}

/// A DTLS handshake record of epoch 0 carrying a ClientHello (RFC 6347 §4.1, §4.2.2).
pub fn is_client_hello(data: &[u8]) -> bool {
    data.len() > 25 && data[0] == 22 && data[3..5] == [0, 0] && data[13] == 1
}

/// The datagram holds a handshake record of epoch ≥ 1: encrypted, so a Finished.
fn encrypted_handshake(mut data: &[u8]) -> bool {
    while data.len() >= 13 {
        let length = usize::from(u16::from_be_bytes([data[11], data[12]]));
        if data[0] == 22 && data[3..5] != [0, 0] {
            return true;
        }
        data = data.get(13 + length..).unwrap_or_default();
    }
    false
}

#[cfg(test)]
mod tests;
