//! One peer's DTLS session: its handshake (a failed Finished told at once), then its records, with the record
//! layer's buffers held only for the length of one operation.

use std::mem::MaybeUninit;

use openssl::error::ErrorStack;
use openssl::ssl::{ErrorCode, ShutdownState, SslRef, SslStream};

use super::server::DtlsServer;
use super::{ffi, DtlsError, Pipe, MAX_DATAGRAM, MAX_PLAINTEXT};
use crate::peer::Peer;

/// What one datagram fed to a session gave.
#[derive(Default, Debug)]
pub struct Fed {
    /// Decrypted application records, in order.
    pub records: Vec<Vec<u8>>,
    /// Datagrams to send to the peer (handshake flights, retransmissions, alerts).
    pub output: Vec<Vec<u8>>,
}

/// One peer's DTLS session: its handshake, then its records.
pub struct DtlsSession {
    stream: SslStream<Pipe>,
    established: bool,
    failure: Option<String>,
    closed: bool,
}

impl DtlsSession {
    /// The session of a ClientHello whose cookie verified, its handshake taken as far as that hello goes; the
    /// datagrams to send.
    pub(crate) fn start(stream: SslStream<Pipe>) -> (Box<Self>, Vec<Vec<u8>>) {
        let mut session = Box::new(DtlsSession {
            stream,
            established: false,
            failure: None,
            closed: false,
        });
        let fed = session.handshake(false);
        (session, fed.output)
    }

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
            match ffi::read_record(&mut self.stream, &mut buffer) {
                Ok([]) => {}
                Ok(record) => {
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
        let allocated = ffi::alloc_buffers(self.stream.ssl());
        if !allocated {
            self.closed = true;
            let _ = ErrorStack::get();
        }
        allocated
    }

    /// Frees the buffers `acquire` gave, unless a record is still buffered in either (`SSL_free_buffers` then
    /// declines and they stay until the next operation's end).
    fn release(&mut self) {
        ffi::free_buffers(self.stream.ssl());
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
            ffi::handle_timeout(self.stream.ssl());
            let _ = ErrorStack::get();
        }
        std::mem::take(&mut self.stream.get_mut().outbox)
    }

    /// How long until the handshake's retransmission timer runs out (RFC 6347 §4.2.4: 1 s, doubled at each
    /// retransmission up to 60 s), when [`Self::handle_timeout`] is due; None once the handshake is over.
    pub fn timeout(&self) -> Option<std::time::Duration> {
        if self.established || self.failure.is_some() {
            return None;
        }
        ffi::get_timeout(self.stream.ssl())
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

    /// A client's established session as DER, to offer again on a later connection ([`crate::tls::DtlsConnector`]):
    /// the server's ticket (RFC 5077) with it when the server gave one. None before the handshake is over.
    pub fn resumable(&self) -> Option<Vec<u8>> {
        ffi::session_to_offer(self.stream.ssl(), self.established, self.failure.is_some())
    }

    /// Tags this session's cache entry with the credential that proved it, for [`DtlsServer::forget`].
    pub fn remember(&self, server: &DtlsServer, tag: &str) {
        if let Some(session) = self.stream.ssl().session() {
            server.tag(session, tag);
        }
    }

    /// Drops this session from the cache (the caller refused its identity): it cannot be resumed.
    pub fn discard(&self, server: &DtlsServer) {
        if let Some(session) = self.stream.ssl().session() {
            server.uncache(session);
        }
    }
}

impl Peer for DtlsSession {
    fn ssl(&self) -> &SslRef {
        self.stream.ssl()
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
