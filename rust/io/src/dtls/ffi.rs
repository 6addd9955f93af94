//! The OpenSSL calls the `openssl` crate does not bind or marks `unsafe`, behind safe functions: every `unsafe`
//! block of the (D)TLS engine (`crate::dtls`, `crate::tls`) is in this file.

use std::ffi::c_void;
use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::os::raw::{c_char, c_int, c_long, c_uchar};
use std::time::Duration;

use foreign_types::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::ssl::{SslContextBuilder, SslContextRef, SslRef, SslSessionRef, SslStream};

use super::MAX_PLAINTEXT;
use crate::tickets;

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

// ---- session tickets (crate::tickets) ------------------------------------------------------------------------

/// `SSL_TICKET_STATUS` and `SSL_TICKET_RETURN` values (ssl.h).
const TICKET_EMPTY: c_int = 3;
const TICKET_NO_DECRYPT: c_int = 4;
const TICKET_SUCCESS: c_int = 5;
const TICKET_SUCCESS_RENEW: c_int = 6;
const TICKET_NONE: c_int = 2;
const RETURN_ABORT: c_int = 0;
const RETURN_IGNORE: c_int = 1;
const RETURN_IGNORE_RENEW: c_int = 2;
const RETURN_USE: c_int = 3;
const RETURN_USE_RENEW: c_int = 4;

type TicketKeyCallback = unsafe extern "C" fn(
    *mut openssl_sys::SSL,
    *mut c_uchar,
    *mut c_uchar,
    *mut openssl_sys::EVP_CIPHER_CTX,
    *mut openssl_sys::EVP_MAC_CTX,
    c_int,
) -> c_int;
type GenerateCallback = unsafe extern "C" fn(*mut openssl_sys::SSL, *mut c_void) -> c_int;
type DecryptCallback = unsafe extern "C" fn(
    *mut openssl_sys::SSL,
    *mut openssl_sys::SSL_SESSION,
    *const c_uchar,
    usize,
    c_int,
    *mut c_void,
) -> c_int;

extern "C" {
    fn SSL_CTX_set_tlsext_ticket_key_evp_cb(
        ctx: *mut openssl_sys::SSL_CTX,
        callback: Option<TicketKeyCallback>,
    ) -> c_int;
    fn SSL_CTX_set_session_ticket_cb(
        ctx: *mut openssl_sys::SSL_CTX,
        generate: Option<GenerateCallback>,
        decrypt: Option<DecryptCallback>,
        arg: *mut c_void,
    ) -> c_int;
    fn SSL_SESSION_set1_ticket_appdata(
        session: *mut openssl_sys::SSL_SESSION,
        data: *const c_void,
        len: usize,
    ) -> c_int;
    fn SSL_SESSION_get0_ticket_appdata(
        session: *mut openssl_sys::SSL_SESSION,
        data: *mut *mut c_void,
        len: *mut usize,
    ) -> c_int;
    fn OSSL_PARAM_construct_utf8_string(
        key: *const c_char,
        buf: *mut c_char,
        bsize: usize,
    ) -> openssl_sys::OSSL_PARAM;
}

/// Installs the ticket callbacks below on a server context whose ex_data holds a [`tickets::Resumption`].
pub(crate) fn install_ticket_callbacks(builder: &mut SslContextBuilder) {
    // SAFETY: plain setters on the context being built; the callbacks are `extern "C"` functions of the right
    // signatures that find their state through the context's ex_data, which lives as long as the context
    unsafe {
        SSL_CTX_set_tlsext_ticket_key_evp_cb(builder.as_ptr(), Some(ticket_key));
        SSL_CTX_set_session_ticket_cb(
            builder.as_ptr(),
            Some(generate_ticket),
            Some(decrypt_ticket),
            std::ptr::null_mut(),
        );
    }
}

/// OpenSSL's ticket key callback (`SSL_CTX_set_tlsext_ticket_key_evp_cb(3)`): `enc` 1, name a new ticket and set
/// up its AES-256-CBC encryption and HMAC-SHA256 under the ring's first key (0: no ticket); `enc` 0, find the key
/// named `key_name` (0: not found, a full handshake; 2: found but not the first, the ticket is renewed).
unsafe extern "C" fn ticket_key(
    ssl: *mut openssl_sys::SSL,
    key_name: *mut c_uchar,
    iv: *mut c_uchar,
    cipher: *mut openssl_sys::EVP_CIPHER_CTX,
    mac: *mut openssl_sys::EVP_MAC_CTX,
    enc: c_int,
) -> c_int {
    let Some(resumption) = tickets::of(SslRef::from_ptr(ssl)) else {
        return 0;
    };
    let (key, answer) = if enc == 1 {
        let Some(key) = resumption.keys.encrypting() else {
            return 0;
        };
        if openssl_sys::RAND_bytes(iv, 16) != 1 {
            return -1;
        }
        std::ptr::copy_nonoverlapping(key.name.as_ptr(), key_name, 16);
        (key, 1)
    } else {
        let name = std::slice::from_raw_parts(key_name, 16);
        match resumption.keys.decrypting(name) {
            Some((key, renew)) => (key, if renew { 2 } else { 1 }),
            None => return 0,
        }
    };
    let init = if enc == 1 {
        openssl_sys::EVP_EncryptInit_ex(
            cipher,
            openssl_sys::EVP_aes_256_cbc(),
            std::ptr::null_mut(),
            key.aes.as_ptr(),
            iv,
        )
    } else {
        openssl_sys::EVP_DecryptInit_ex(
            cipher,
            openssl_sys::EVP_aes_256_cbc(),
            std::ptr::null_mut(),
            key.aes.as_ptr(),
            iv,
        )
    };
    if init != 1 {
        return -1;
    }
    let mut digest = *b"SHA256\0";
    let mut hmac = key.hmac;
    let params = [
        OSSL_PARAM_construct_utf8_string(c"digest".as_ptr(), digest.as_mut_ptr().cast(), 0),
        openssl_sys::OSSL_PARAM_construct_octet_string(
            c"key".as_ptr(),
            hmac.as_mut_ptr().cast(),
            hmac.len(),
        ),
        openssl_sys::OSSL_PARAM_construct_end(),
    ];
    if openssl_sys::EVP_MAC_CTX_set_params(mac, params.as_ptr()) != 1 {
        return -1;
    }
    answer
}

/// Before a ticket is encrypted: binds it to the PSK the session was established with (`tickets::Resumption`).
unsafe extern "C" fn generate_ticket(ssl: *mut openssl_sys::SSL, _: *mut c_void) -> c_int {
    let ssl = SslRef::from_ptr(ssl);
    let (Some(resumption), Some(session)) = (tickets::of(ssl), ssl.session()) else {
        return 1;
    };
    let binding = resumption.binding(ssl);
    SSL_SESSION_set1_ticket_appdata(session.as_ptr(), binding.as_ptr().cast(), binding.len())
}

/// After a ticket is decrypted (or found absent or undecryptable): resume only if its PSK binding still holds.
unsafe extern "C" fn decrypt_ticket(
    ssl: *mut openssl_sys::SSL,
    session: *mut openssl_sys::SSL_SESSION,
    _: *const c_uchar,
    _: usize,
    status: c_int,
    _: *mut c_void,
) -> c_int {
    match status {
        TICKET_SUCCESS | TICKET_SUCCESS_RENEW => {
            let Some(resumption) = tickets::of(SslRef::from_ptr(ssl)) else {
                return RETURN_IGNORE_RENEW;
            };
            let mut data: *mut c_void = std::ptr::null_mut();
            let mut len = 0usize;
            if SSL_SESSION_get0_ticket_appdata(session, &mut data, &mut len) != 1 {
                return RETURN_IGNORE_RENEW;
            }
            let binding = if data.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(data.cast::<u8>(), len)
            };
            if !resumption.still_bound(binding) {
                RETURN_IGNORE_RENEW // a full handshake, refused like any other if the credential is gone
            } else if status == TICKET_SUCCESS {
                RETURN_USE
            } else {
                RETURN_USE_RENEW
            }
        }
        // the client asked for a ticket, or offered one no key of the ring opens: a full handshake, a new ticket
        TICKET_EMPTY | TICKET_NO_DECRYPT => RETURN_IGNORE_RENEW,
        TICKET_NONE => RETURN_IGNORE,
        _ => RETURN_ABORT,
    }
}

/// Sets the session a client offers to resume (`SSL_set_session`).
pub(crate) fn offer_session(ssl: &mut SslRef, session: &SslSessionRef) -> Result<(), ErrorStack> {
    // SAFETY: `SSL_set_session` takes its own reference to the session; the `openssl` crate marks it unsafe only
    // because a session of another context could carry another protocol version or method: a DTLS 1.2 client's
    // session decoded from DER only, and OpenSSL checks its version against the method (a mismatch is an error)
    unsafe { ssl.set_session(session) }
}

/// A client's session as DER once its handshake is over (`established`, not `failed`), the server's ticket (RFC 5077)
/// with it when the server gave one: what [`offer_session`] offers on a later connection, DTLS or TLS.
pub(crate) fn session_to_offer(ssl: &SslRef, established: bool, failed: bool) -> Option<Vec<u8>> {
    if !established || failed {
        return None;
    }
    ssl.session().and_then(|session| session.to_der().ok())
}
