//! One TLS connection on a byte pipe, server or client side: its handshake, then its records.

use std::mem::MaybeUninit;

use openssl::error::ErrorStack;
use openssl::ssl::{ErrorCode, Ssl, SslRef, SslStream};

use super::StreamPipe;
use crate::dtls::{ffi, MAX_PLAINTEXT};
use crate::peer::Peer;

/// What one chunk of bytes fed to a session gave.
#[derive(Default, Debug)]
pub struct TlsFed {
    /// Decrypted application data, in order (records joined: TLS is a byte stream).
    pub plaintext: Vec<u8>,
    /// Bytes to send to the peer (handshake flights, alerts, a close_notify answered).
    pub output: Vec<u8>,
}

/// One TLS connection: its handshake, then its records.
pub struct TlsSession {
    stream: SslStream<StreamPipe>,
    established: bool,
    failure: Option<String>,
    closed: bool,
}

impl TlsSession {
    pub(super) fn new(ssl: Ssl) -> Result<Self, ErrorStack> {
        Ok(TlsSession {
            stream: SslStream::new(ssl, StreamPipe::default())?,
            established: false,
            failure: None,
            closed: false,
        })
    }

    /// Runs the handshake as far as it goes with nothing received: a client's ClientHello. The bytes to send.
    pub fn start(&mut self) -> Vec<u8> {
        self.handshake(&mut TlsFed::default());
        std::mem::take(&mut self.stream.get_mut().outbox)
    }

    /// Takes bytes from the peer: handshake progress, or the application data they complete. After it, check
    /// [`Self::established`], [`Self::failure`] (the handshake failed: the alert is in the output) and
    /// [`Self::closed`] (close_notify, a fatal alert, or a record that does not decrypt).
    pub fn feed(&mut self, data: &[u8]) -> TlsFed {
        let mut fed = TlsFed::default();
        if self.failure.is_some() || self.closed {
            return fed;
        }
        self.stream.get_mut().inbox.extend(data);
        if self.established {
            self.read(&mut fed);
        } else {
            self.handshake(&mut fed);
        }
        fed.output = std::mem::take(&mut self.stream.get_mut().outbox);
        fed
    }

    fn handshake(&mut self, fed: &mut TlsFed) {
        match self.stream.do_handshake() {
            Ok(()) => {
                self.established = true;
                self.read(fed); // the peer's first records may have come with its Finished
            }
            Err(error) if error.code() == ErrorCode::WANT_READ => {}
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
    }

    fn read(&mut self, fed: &mut TlsFed) {
        // not zeroed: a memset of 16 KiB per read would cost more than the record's decryption
        let mut buffer = [MaybeUninit::<u8>::uninit(); MAX_PLAINTEXT];
        loop {
            match ffi::read_record(&mut self.stream, &mut buffer) {
                Ok([]) => return,
                Ok(record) => fed.plaintext.extend_from_slice(record),
                Err(error) if error.code() == ErrorCode::WANT_READ => return,
                Err(error) => {
                    self.closed = true;
                    if error.code() == ErrorCode::ZERO_RETURN {
                        let _ = self.stream.shutdown(); // close_notify answered (RFC 5246 §7.2.1)
                    }
                    let _ = ErrorStack::get();
                    return;
                }
            }
        }
    }

    /// Encrypts `data` (any length: as many records as it takes); the bytes to send.
    pub fn send(&mut self, mut data: &[u8]) -> Vec<u8> {
        while self.established && !self.closed && !data.is_empty() {
            match self.stream.ssl_write(data) {
                Ok(written) => data = &data[written..],
                Err(_) => {
                    self.closed = true;
                    let _ = ErrorStack::get();
                }
            }
        }
        std::mem::take(&mut self.stream.get_mut().outbox)
    }

    /// Sends close_notify (when established); the bytes to send.
    pub fn shutdown(&mut self) -> Vec<u8> {
        if self.established && !self.closed {
            let _ = self.stream.shutdown();
            let _ = ErrorStack::get();
            self.closed = true;
        }
        std::mem::take(&mut self.stream.get_mut().outbox)
    }

    /// This connection resumed an earlier session (an abbreviated handshake: a ticket the server took).
    pub fn session_reused(&self) -> bool {
        self.stream.ssl().session_reused()
    }

    /// A client's established session as DER, to offer again on a later connection
    /// ([`super::TlsConnector::connect_offering`]), the server's ticket with it when it gave one. None before the
    /// handshake is over.
    pub fn resumable(&self) -> Option<Vec<u8>> {
        ffi::session_to_offer(self.stream.ssl(), self.established, self.failure.is_some())
    }

    /// The handshake is over.
    pub fn established(&self) -> bool {
        self.established
    }

    /// Why the handshake failed, once it has.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The peer closed the connection (close_notify or fatal alert), or it was shut down.
    pub fn closed(&self) -> bool {
        self.closed
    }
}

impl Peer for TlsSession {
    fn ssl(&self) -> &SslRef {
        self.stream.ssl()
    }
}
