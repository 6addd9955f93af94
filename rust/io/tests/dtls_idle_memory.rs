//! Heap per idle DTLS session (issue 28 #4), alone in its process and on the main thread (no test harness: glibc's
//! `mallinfo2` counts the main arena, and other tests allocating beside it would blur the figure).
//!
//! An idle session held ~69 kB of heap on 4cebb5c, 35 kB of it the record layer's read and write buffers (a 16 KiB
//! record and its expansion each), allocated at the handshake and kept. What stays now: the `SSL` itself (7.6 kB in
//! OpenSSL 3.0), its keys, session and DTLS state (~5 kB), and the 21.8 kB handshake message buffer (`init_buf`),
//! which OpenSSL keeps for the session's life on DTLS over UDP "in case there are any unexpected retransmits"
//! (statem_lib.c `tls_finish_handshake`) and which no public call frees.

use devicehub_io::dtls::{Accepted, DtlsServer, DtlsSession, Pipe, PskServer};
use openssl::asn1::Asn1Time;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::ssl::{
    ErrorCode, ShutdownState, Ssl, SslContext, SslMethod, SslOptions, SslSessionCacheMode,
    SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::{X509Name, X509};

const IDENTITY: &[u8] = b"dtls-memory-device-0001";
const KEY: &[u8] = b"sixteen-byte-key";
const SESSIONS: usize = 500;
const LIMIT: usize = 40_000; // bytes of heap per idle session; 4cebb5c: ~69 000

fn server() -> DtlsServer {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    let key = PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
    let mut name = X509Name::builder().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, "devicehub")
        .unwrap();
    let name = name.build();
    let mut builder = X509::builder().unwrap();
    builder.set_version(2).unwrap();
    builder.set_subject_name(&name).unwrap();
    builder.set_issuer_name(&name).unwrap();
    builder.set_pubkey(&key).unwrap();
    builder
        .set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    builder
        .set_not_after(&Asn1Time::days_from_now(30).unwrap())
        .unwrap();
    builder.sign(&key, MessageDigest::sha256()).unwrap();
    let certificate = builder.build();
    let server = DtlsServer::new(
        &certificate.to_der().unwrap(),
        &key.private_key_to_pkcs8().unwrap(),
        20_000,
        3_600,
    )
    .unwrap();
    server.set_psk(IDENTITY, KEY).unwrap();
    server
}

/// A PSK client that caches no sessions (a client cache would grow the heap too).
fn client() -> SslContext {
    let mut builder = SslContext::builder(SslMethod::dtls()).unwrap();
    builder
        .set_min_proto_version(Some(SslVersion::DTLS1_2))
        .unwrap();
    builder
        .set_max_proto_version(Some(SslVersion::DTLS1_2))
        .unwrap();
    builder.set_cipher_list("PSK-AES128-CCM8").unwrap();
    builder.set_options(SslOptions::NO_TICKET | SslOptions::NO_QUERY_MTU);
    builder.set_session_cache_mode(SslSessionCacheMode::OFF);
    builder.set_verify(SslVerifyMode::NONE);
    builder.set_psk_client_callback(|_, _, id, psk| {
        id[..IDENTITY.len()].copy_from_slice(IDENTITY);
        id[IDENTITY.len()] = 0;
        psk[..KEY.len()].copy_from_slice(KEY);
        Ok(KEY.len())
    });
    builder.build()
}

/// A full handshake, then one record each way (an idle session has been used); the server's session.
fn session(server: &DtlsServer, context: &SslContext, port: u16) -> Box<DtlsSession> {
    let peer = format!("127.0.0.1:{port}");
    let mut ssl = Ssl::new(context).unwrap();
    ssl.set_connect_state();
    ssl.set_mtu(1_400).unwrap();
    let mut client = SslStream::new(ssl, Pipe::default()).unwrap();
    let mut session: Option<Box<DtlsSession>> = None;
    for _ in 0..16 {
        let done = match client.do_handshake() {
            Ok(()) => true,
            Err(error) if error.code() == ErrorCode::WANT_READ => false,
            Err(error) => panic!("client handshake: {error}"),
        };
        for datagram in std::mem::take(&mut client.get_mut().outbox) {
            let output = match session.as_mut() {
                None => match server.accept(peer.as_bytes(), &datagram) {
                    Accepted::HelloVerify(output) => output,
                    Accepted::Session(accepted, output) => {
                        session = Some(accepted);
                        output
                    }
                    Accepted::Dropped => panic!("hello dropped"),
                },
                Some(session) => session.feed(&datagram).output,
            };
            client.get_mut().inbox.extend(output);
        }
        if done && session.as_ref().is_some_and(|s| s.established()) {
            break;
        }
    }
    let mut session = session.expect("a session");
    client.ssl_write(b"</rd?ep=x>").unwrap();
    for datagram in std::mem::take(&mut client.get_mut().outbox) {
        assert_eq!(session.feed(&datagram).records.len(), 1);
    }
    client
        .get_mut()
        .inbox
        .extend(session.send(b"2.01").unwrap());
    let mut buffer = [0u8; 16];
    assert_eq!(client.ssl_read(&mut buffer).unwrap(), 4);
    client.set_shutdown(ShutdownState::SENT | ShutdownState::RECEIVED);
    session
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's counters
    unsafe { libc::mallinfo2().uordblks }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn main() {
    let server = server();
    let context = client();
    drop(session(&server, &context, 1)); // one-off allocations (tables, the cache) out of the way
    let before = heap_in_use();
    let sessions: Vec<_> = (0..SESSIONS)
        .map(|n| session(&server, &context, 2 + u16::try_from(n).unwrap()))
        .collect();
    let per_session = heap_in_use().saturating_sub(before) / SESSIONS;
    assert!(sessions.iter().all(|session| session.established()));
    println!(
        "dtls_idle_memory: {per_session} bytes of heap per idle session ({SESSIONS} sessions)"
    );
    assert!(
        per_session <= LIMIT,
        "{per_session} bytes of heap per idle session, above {LIMIT}"
    );
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn main() {}
