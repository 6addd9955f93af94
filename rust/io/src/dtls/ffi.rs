//! The OpenSSL calls the `openssl` crate does not bind or marks `unsafe`, behind safe functions: every `unsafe`
//! block of the (D)TLS engine (`crate::dtls`, `crate::tls`) is in this file.

use std::ffi::c_void;
use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::os::raw::{c_int, c_long};
use std::time::Duration;

use foreign_types::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::ssl::{SslContextBuilder, SslContextRef, SslRef, SslSessionRef, SslStream};

use super::MAX_PLAINTEXT;

/// `SSL_ctrl` commands behind `DTLSv1_get_timeout` and `DTLSv1_handle_timeout` (macros in ssl.h, not bound by
/// openssl-sys).
const DTLS_CTRL_GET_TIMEOUT: c_int = 73;
const DTLS_CTRL_HANDLE_TIMEOUT: c_int = 74;

extern "C" {
    // ssl.h / bio.h; openssl-sys links libssl and libcrypto but does not declare these
    fn DTLSv1_listen(ssl: *mut openssl_sys::SSL, client: *mut c_void) -> c_int;
    fn BIO_ADDR_new() -> *mut c_void;
    fn BIO_ADDR_free(addr: *mut c_void);
    fn SSL_alloc_buffers(ssl: *mut openssl_sys::SSL) -> c_int;
    fn SSL_free_buffers(ssl: *mut openssl_sys::SSL) -> c_int;
    fn SSL_CTX_set_timeout(ctx: *mut openssl_sys::SSL_CTX, seconds: c_long) -> c_long;
}

/// How long a cached session stays resumable (`SSL_CTX_set_timeout`).
pub(super) fn set_session_timeout(builder: &mut SslContextBuilder, seconds: u32) {
    // SAFETY: a plain setter on the context being built
    unsafe {
        SSL_CTX_set_timeout(builder.as_ptr(), c_long::from(seconds));
    }
}

/// `DTLSv1_listen` on an accepting `SSL` whose BIOs hold one datagram: true when it was a ClientHello with a
/// valid cookie (the `SSL` goes on with the handshake), false when OpenSSL answered it or dropped it.
pub(super) fn listen(ssl: &SslRef) -> Result<bool, ErrorStack> {
    // SAFETY: the SSL is valid and has its BIOs (the caller made its SslStream); the address is ours and freed
    // after
    let listened = unsafe {
        let address = BIO_ADDR_new();
        if address.is_null() {
            return Err(ErrorStack::get());
        }
        let listened = DTLSv1_listen(ssl.as_ptr(), address);
        BIO_ADDR_free(address);
        listened
    };
    Ok(listened > 0)
}

/// `SSL_alloc_buffers`: gives the record layer its read and write buffers back; false if they cannot be
/// allocated. Buffers already there are kept.
pub(super) fn alloc_buffers(ssl: &SslRef) -> bool {
    // SAFETY: a valid SSL
    unsafe { SSL_alloc_buffers(ssl.as_ptr()) == 1 }
}

/// `SSL_free_buffers`: frees the record layer's buffers, unless a record is still buffered in either (OpenSSL
/// then declines and they stay).
pub(super) fn free_buffers(ssl: &SslRef) {
    // SAFETY: a valid SSL, with no borrow of its buffers outstanding (the `openssl` crate lends none out)
    unsafe {
        SSL_free_buffers(ssl.as_ptr());
    }
}

/// `DTLSv1_handle_timeout`: retransmits the last flight if the handshake timer ran out.
pub(crate) fn handle_timeout(ssl: &SslRef) {
    // SAFETY: DTLSv1_handle_timeout on a valid SSL
    unsafe {
        openssl_sys::SSL_ctrl(
            ssl.as_ptr(),
            DTLS_CTRL_HANDLE_TIMEOUT,
            0,
            std::ptr::null_mut(),
        );
    }
}

/// `DTLSv1_get_timeout`: how long until the handshake's retransmission timer runs out (RFC 6347 §4.2.4), None when
/// no timer runs.
pub(crate) fn get_timeout(ssl: &SslRef) -> Option<Duration> {
    let mut left = Timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: DTLSv1_get_timeout writes one `struct timeval` through the pointer, which points at ours
    let running = unsafe {
        openssl_sys::SSL_ctrl(
            ssl.as_ptr(),
            DTLS_CTRL_GET_TIMEOUT,
            0,
            std::ptr::addr_of_mut!(left).cast(),
        )
    };
    let micros = u64::try_from(left.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(left.tv_usec).unwrap_or(0);
    (running == 1).then(|| Duration::from_micros(micros))
}

/// `struct timeval` as OpenSSL writes it (`time_t` and `suseconds_t` are `long` on the platforms we build for).
#[repr(C)]
struct Timeval {
    tv_sec: c_long,
    tv_usec: c_long,
}

/// Drops `session` from `context`'s cache, if it is there.
pub(super) fn remove_session(context: &SslContextRef, session: &SslSessionRef) {
    // SAFETY: `SSL_CTX_remove_session` looks the session up by its id in this context's cache and removes only
    // what it finds there: a session of another context is simply not found (every session here comes from an
    // `SSL` of its server's one context)
    unsafe {
        context.remove_session(session);
    }
}

/// Reads one record into `buffer`, which may be uninitialised; the plaintext read, empty at end of file.
pub(crate) fn read_record<'a, S: Read + Write>(
    stream: &mut SslStream<S>,
    buffer: &'a mut [MaybeUninit<u8>; MAX_PLAINTEXT],
) -> Result<&'a [u8], openssl::ssl::Error> {
    let n = stream.ssl_read_uninit(buffer)?;
    // SAFETY: OpenSSL wrote the first `n` bytes
    Ok(unsafe { std::slice::from_raw_parts(buffer.as_ptr().cast::<u8>(), n) })
}
