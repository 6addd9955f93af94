//! DTLS library choice (issue 13 #1): OpenSSL through the `openssl` crate, both ends in one thread on in-memory
//! datagram pipes, the scenario `bench/micro/dtls_library_bench.py` runs for python-mbedtls.
//!
//! Measures, for TLS_PSK_WITH_AES_128_CCM_8 (and TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with P-256 certificates on
//! both sides, the server requesting the client's):
//! - full DTLS 1.2 handshakes per second, HelloVerifyRequest cookie exchange included, client and server cost
//!   together (no session cache, no tickets: every handshake is a full one);
//! - application records per second for 64-byte payloads: the client encrypts, the server decrypts (one record);
//!   every record is checked to decrypt to the bytes sent, so a broken setup cannot print a figure.
//!
//! The transport keeps datagram boundaries: each write is one datagram, each read returns one datagram or
//! `WouldBlock`; the MTU is set (1 400 bytes). Figures are per CPU-second of the one thread (other jobs on the
//! same cores slow the wall clock, not this; wall-clock rates are printed too), medians of 3 runs. A third row
//! runs the certificate suite with ECDHE on P-521, the curve two Mbed TLS 2.28 ends agree on, for a like-for-like
//! comparison with the python-mbedtls bench. Prints one line per row and one JSON object on the last line.
//! Build and run (outside rust/'s workspace):
//! `cargo run --release --manifest-path bench/dtls_openssl/Cargo.toml -- [--smoke] [--json PATH]`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::memcmp;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::sign::Signer;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslSessionCacheMode,
    SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::{X509Name, X509};

const MTU: u32 = 1_400;
const PAYLOAD: usize = 64;
const PSK_IDENTITY: &[u8] = b"dtls-bench-device-00000";
const PSK_KEY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
/// What the cookie binds; over UDP it is the peer's address (the service uses "host:port").
const CLIENT_ID: &[u8] = b"127.0.0.1:40000";
const RUNS: usize = 3;

/// Cookies made and accepted: the first handshake checks that the HelloVerifyRequest round really ran.
static COOKIES_MADE: AtomicUsize = AtomicUsize::new(0);
static COOKIES_ACCEPTED: AtomicUsize = AtomicUsize::new(0);

type Queue = Rc<RefCell<VecDeque<Vec<u8>>>>;

/// One end of a datagram pipe: writes go out as one datagram each, reads take one datagram or would block.
struct Pipe {
    inbox: Queue,
    outbox: Queue,
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inbox.borrow_mut().pop_front() {
            Some(datagram) => {
                let n = datagram.len().min(buf.len()); // a datagram longer than the buffer is truncated, as UDP
                buf[..n].copy_from_slice(&datagram[..n]);
                Ok(n)
            }
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outbox.borrow_mut().push_back(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn pipes() -> (Pipe, Pipe) {
    let a: Queue = Rc::default();
    let b: Queue = Rc::default();
    (
        Pipe {
            inbox: a.clone(),
            outbox: b.clone(),
        },
        Pipe {
            inbox: b,
            outbox: a,
        },
    )
}

#[derive(Clone, Copy, PartialEq)]
enum Suite {
    Psk,
    /// ECDHE on P-256, the RFC 7925 §4.4 profile
    EcdheEcdsa,
    /// ECDHE on P-521: what two Mbed TLS 2.28 ends agree on (the server's preference, strongest first)
    EcdheEcdsaP521,
}

impl Suite {
    fn iana(self) -> &'static str {
        match self {
            Suite::Psk => "TLS_PSK_WITH_AES_128_CCM_8",
            Suite::EcdheEcdsa | Suite::EcdheEcdsaP521 => "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8",
        }
    }

    fn group(self) -> &'static str {
        match self {
            Suite::Psk | Suite::EcdheEcdsa => "P-256",
            // P-256 stays listed: in TLS 1.2 the groups also bound the ECDSA certificates' curve
            Suite::EcdheEcdsaP521 => "P-521:P-256",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Suite::Psk => "PSK",
            Suite::EcdheEcdsa => "P-256 certificates both sides, ECDHE P-256",
            Suite::EcdheEcdsaP521 => "P-256 certificates both sides, ECDHE P-521",
        }
    }

    fn openssl(self) -> &'static str {
        match self {
            Suite::Psk => "PSK-AES128-CCM8",
            Suite::EcdheEcdsa | Suite::EcdheEcdsaP521 => "ECDHE-ECDSA-AES128-CCM8",
        }
    }
}

fn p256_key() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

/// A self-signed P-256 certificate (ECDSA-SHA256) for `cn`.
fn certificate(cn: &str, key: &PKey<Private>) -> X509 {
    let mut name = X509Name::builder().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, cn).unwrap();
    let name = name.build();
    let mut serial = BigNum::new().unwrap();
    serial.rand(64, MsbOption::MAYBE_ZERO, false).unwrap();
    let mut builder = X509::builder().unwrap();
    builder.set_version(2).unwrap();
    builder
        .set_serial_number(&serial.to_asn1_integer().unwrap())
        .unwrap();
    builder.set_subject_name(&name).unwrap();
    builder.set_issuer_name(&name).unwrap();
    builder.set_pubkey(key).unwrap();
    builder
        .set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    builder
        .set_not_after(&Asn1Time::days_from_now(30).unwrap())
        .unwrap();
    builder.sign(key, MessageDigest::sha256()).unwrap();
    builder.build()
}

/// DTLS 1.2 only, one suite, one ECDHE group, no session cache and no tickets (the service
/// resumes nothing: every handshake is a full one).
fn common(suite: Suite) -> SslContextBuilder {
    let mut builder = SslContext::builder(SslMethod::dtls()).unwrap();
    builder
        .set_min_proto_version(Some(SslVersion::DTLS1_2))
        .unwrap();
    builder
        .set_max_proto_version(Some(SslVersion::DTLS1_2))
        .unwrap();
    builder.set_cipher_list(suite.openssl()).unwrap();
    builder.set_groups_list(suite.group()).unwrap();
    builder.set_session_cache_mode(SslSessionCacheMode::OFF);
    builder.set_options(SslOptions::NO_TICKET | SslOptions::NO_QUERY_MTU);
    builder
}

fn server_context(suite: Suite) -> SslContext {
    let mut builder = common(suite);
    builder.set_options(SslOptions::COOKIE_EXCHANGE);
    // HMAC-SHA256 of the peer's id under a server secret (Mbed TLS's cookie is an HMAC-SHA224 of it)
    let secret = PKey::hmac(b"cookie secret, fixed for the bench").unwrap();
    let verify_secret = secret.clone();
    builder.set_cookie_generate_cb(move |_, out| {
        let mut signer = Signer::new(MessageDigest::sha256(), &secret)?;
        signer.update(CLIENT_ID)?;
        let mac = signer.sign_to_vec()?;
        out[..mac.len()].copy_from_slice(&mac);
        COOKIES_MADE.fetch_add(1, Ordering::Relaxed);
        Ok(mac.len())
    });
    builder.set_cookie_verify_cb(move |_, cookie| {
        let Ok(mut signer) = Signer::new(MessageDigest::sha256(), &verify_secret) else {
            return false;
        };
        let Ok(mac) = signer.update(CLIENT_ID).and_then(|_| signer.sign_to_vec()) else {
            return false;
        };
        let valid = cookie.len() == mac.len() && memcmp::eq(cookie, &mac);
        COOKIES_ACCEPTED.fetch_add(usize::from(valid), Ordering::Relaxed);
        valid
    });
    match suite {
        Suite::Psk => builder.set_psk_server_callback(|_, identity, psk| {
            assert_eq!(
                identity,
                Some(PSK_IDENTITY),
                "the server got another PSK identity"
            );
            psk[..PSK_KEY.len()].copy_from_slice(&PSK_KEY);
            Ok(PSK_KEY.len())
        }),
        Suite::EcdheEcdsa | Suite::EcdheEcdsaP521 => {
            let key = p256_key();
            builder
                .set_certificate(&certificate("devicehub", &key))
                .unwrap();
            builder.set_private_key(&key).unwrap();
            // ask for the client's certificate and accept any (the service checks it itself, as with Mbed TLS's
            // authmode OPTIONAL); the CertificateVerify signature is still verified by OpenSSL
            builder.set_verify_callback(
                SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
                |_, _| true,
            );
        }
    }
    builder.build()
}

fn client_context(suite: Suite) -> SslContext {
    let mut builder = common(suite);
    match suite {
        Suite::Psk => builder.set_psk_client_callback(|_, _hint, identity, psk| {
            identity[..PSK_IDENTITY.len()].copy_from_slice(PSK_IDENTITY);
            identity[PSK_IDENTITY.len()] = 0; // a C string
            psk[..PSK_KEY.len()].copy_from_slice(&PSK_KEY);
            Ok(PSK_KEY.len())
        }),
        Suite::EcdheEcdsa | Suite::EcdheEcdsaP521 => {
            let key = p256_key();
            builder
                .set_certificate(&certificate("dtls-bench-device-00000", &key))
                .unwrap();
            builder.set_private_key(&key).unwrap();
            builder.set_verify(SslVerifyMode::NONE); // the simulator does not check the server either
        }
    }
    builder.build()
}

type Stream = SslStream<Pipe>;

/// Drives a handshake step; `Ok(true)` when done, `Ok(false)` when it waits for the peer.
fn step(stream: &mut Stream) -> bool {
    match stream.do_handshake() {
        Ok(()) => true,
        Err(e) if e.code() == ErrorCode::WANT_READ => false,
        Err(e) => panic!("handshake failed: {e}"),
    }
}

/// One full handshake, cookie exchange included; returns the connected pair.
fn handshake(client_ctx: &SslContext, server_ctx: &SslContext) -> (Stream, Stream) {
    let (client_pipe, server_pipe) = pipes();
    let mut client = Ssl::new(client_ctx).unwrap();
    client.set_connect_state();
    client.set_mtu(MTU).unwrap();
    let mut server = Ssl::new(server_ctx).unwrap();
    server.set_accept_state();
    server.set_mtu(MTU).unwrap();
    let mut client = SslStream::new(client, client_pipe).unwrap();
    let mut server = SslStream::new(server, server_pipe).unwrap();
    let (mut client_done, mut server_done) = (false, false);
    for _ in 0..32 {
        client_done = client_done || step(&mut client);
        server_done = server_done || step(&mut server);
        if client_done && server_done {
            return (client, server);
        }
    }
    panic!("the handshake did not finish");
}

fn handshakes_per_s(suite: Suite, budget: f64) -> Rate {
    let (client_ctx, server_ctx) = (client_context(suite), server_context(suite));
    let cookies = (
        COOKIES_MADE.load(Ordering::Relaxed),
        COOKIES_ACCEPTED.load(Ordering::Relaxed),
    );
    let (client, server) = handshake(&client_ctx, &server_ctx);
    let after = (
        COOKIES_MADE.load(Ordering::Relaxed),
        COOKIES_ACCEPTED.load(Ordering::Relaxed),
    );
    assert_eq!(
        (after.0 - cookies.0, after.1 - cookies.1),
        (1, 1),
        "no HelloVerifyRequest round"
    );
    let negotiated = server
        .ssl()
        .current_cipher()
        .unwrap()
        .standard_name()
        .unwrap_or("?");
    assert_eq!(negotiated, suite.iana(), "another suite was negotiated");
    assert!(server.ssl().version2() == Some(SslVersion::DTLS1_2));
    if suite != Suite::Psk {
        let bits = client.ssl().peer_tmp_key().unwrap().bits();
        let expected = if suite == Suite::EcdheEcdsa { 256 } else { 521 };
        assert_eq!(bits, expected, "ECDHE ran on another group");
    }
    drop((client, server));
    let start = Stopwatch::start();
    let mut count = 0u64;
    while start.cpu() < budget {
        let pair = handshake(&client_ctx, &server_ctx);
        drop(pair);
        count += 1;
    }
    start.rate(count)
}

fn records_per_s(suite: Suite, budget: f64) -> Rate {
    let (client_ctx, server_ctx) = (client_context(suite), server_context(suite));
    let (mut client, mut server) = handshake(&client_ctx, &server_ctx);
    let mut payload = [0u8; PAYLOAD];
    let mut received = [0u8; 2 * PAYLOAD];
    let start = Stopwatch::start();
    let mut count = 0u64;
    while start.cpu() < budget {
        for _ in 0..1_000 {
            payload[..8].copy_from_slice(&count.to_be_bytes()); // each record differs
            assert_eq!(client.ssl_write(&payload).unwrap(), PAYLOAD);
            assert_eq!(
                client.get_ref().outbox.borrow().len(),
                1,
                "one record, one datagram"
            );
            let n = server.ssl_read(&mut received).unwrap();
            assert_eq!(
                &received[..n],
                &payload[..],
                "the record did not decrypt to the bytes sent"
            );
            count += 1;
        }
    }
    start.rate(count)
}

/// Seconds of CPU this thread has used: the figures are per CPU-second, so a loaded machine (other jobs on the
/// same cores) slows the wall clock, not the figure.
fn thread_cpu() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) },
        0
    );
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

struct Stopwatch {
    wall: Instant,
    cpu: f64,
}

impl Stopwatch {
    fn start() -> Self {
        Stopwatch {
            wall: Instant::now(),
            cpu: thread_cpu(),
        }
    }

    fn cpu(&self) -> f64 {
        thread_cpu() - self.cpu
    }

    fn rate(&self, count: u64) -> Rate {
        Rate {
            cpu: count as f64 / self.cpu(),
            wall: count as f64 / self.wall.elapsed().as_secs_f64(),
        }
    }
}

/// Operations per CPU-second of this thread, and per wall-clock second.
#[derive(Clone, Copy)]
struct Rate {
    cpu: f64,
    wall: f64,
}

/// The run with the median CPU rate.
fn median(mut runs: Vec<Rate>) -> Rate {
    runs.sort_by(|a, b| a.cpu.partial_cmp(&b.cpu).unwrap());
    runs[runs.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .map(|i| args[i + 1].clone());
    let budget = if smoke { 0.05 } else { 1.0 }; // CPU seconds per run
    let mut rows = Vec::new();
    for suite in [Suite::Psk, Suite::EcdheEcdsa, Suite::EcdheEcdsaP521] {
        let handshakes = median((0..RUNS).map(|_| handshakes_per_s(suite, budget)).collect());
        let records = median((0..RUNS).map(|_| records_per_s(suite, budget)).collect());
        println!(
            "dtls openssl ({}): {} ({}): {:.0} full handshakes per CPU-second (cookie exchange, both ends), \
             {:.0} records per CPU-second of {PAYLOAD} B (encrypt + decrypt), median of {RUNS} \
             (wall clock: {:.0}/s, {:.0}/s)",
            openssl::version::version(),
            suite.iana(),
            suite.label(),
            handshakes.cpu,
            records.cpu,
            handshakes.wall,
            records.wall,
        );
        let group = match suite {
            Suite::Psk => "none",
            Suite::EcdheEcdsa => "secp256r1",
            Suite::EcdheEcdsaP521 => "secp521r1",
        };
        rows.push(format!(
            "{{\"suite\": \"{}\", \"ecdhe_group\": \"{group}\", \"handshakes_per_cpu_s\": {:.1}, \
             \"records_per_cpu_s\": {:.1}, \"handshakes_per_wall_s\": {:.1}, \"records_per_wall_s\": {:.1}}}",
            suite.iana(),
            handshakes.cpu,
            records.cpu,
            handshakes.wall,
            records.wall,
        ));
    }
    let json = format!(
        "{{\"bench\": \"dtls_openssl\", \"smoke\": {smoke}, \"library\": \"{}\", \"mtu\": {MTU}, \
         \"payload_bytes\": {PAYLOAD}, \"runs\": {RUNS}, \"results\": [{}]}}",
        openssl::version::version(),
        rows.join(", ")
    );
    println!("{json}");
    if let Some(path) = json_path {
        std::fs::write(path, json + "\n").unwrap();
    }
}
