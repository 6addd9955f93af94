//! The DTLS server engine's own CPU (client work excluded: only the engine's calls are timed): a full handshake
//! and an abbreviated one (a cached session resumed) for a PSK and for an ECDHE-ECDSA P-256 client with a
//! certificate, cookie exchange included; and one 80-byte record in plus one 16-byte record out (a notification
//! and its ACK). Run with `cargo bench -p devicehub-io --bench dtls`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use devicehub_io::dtls::{Accepted, DtlsServer, DtlsSession, Pipe, PskServer};
use openssl::asn1::Asn1Time;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{
    ErrorCode, ShutdownState, Ssl, SslContext, SslMethod, SslOptions, SslSession,
    SslSessionCacheMode, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::{X509Name, X509};

const PEER: &[u8] = b"127.0.0.1:40000";
const IDENTITY: &[u8] = b"dtls-bench-device-00000";
const KEY: &[u8] = b"sixteen-byte-key";

fn p256() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

fn self_signed(cn: &str, key: &PKey<Private>) -> X509 {
    let mut name = X509Name::builder().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, cn).unwrap();
    let name = name.build();
    let mut builder = X509::builder().unwrap();
    builder.set_version(2).unwrap();
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

fn server() -> DtlsServer {
    let key = p256();
    let certificate = self_signed("devicehub", &key);
    let server = DtlsServer::new(
        &certificate.to_der().unwrap(),
        &key.private_key_to_pkcs8().unwrap(),
        1_000,
        3_600,
    )
    .unwrap();
    server.set_psk(IDENTITY, KEY).unwrap();
    server
}

fn client(certificate: bool) -> SslContext {
    let mut builder = SslContext::builder(SslMethod::dtls()).unwrap();
    builder
        .set_min_proto_version(Some(SslVersion::DTLS1_2))
        .unwrap();
    builder
        .set_max_proto_version(Some(SslVersion::DTLS1_2))
        .unwrap();
    builder.set_options(SslOptions::NO_TICKET | SslOptions::NO_QUERY_MTU);
    builder.set_session_cache_mode(SslSessionCacheMode::CLIENT);
    builder.set_verify(SslVerifyMode::NONE);
    if certificate {
        builder.set_cipher_list("ECDHE-ECDSA-AES128-CCM8").unwrap();
        builder.set_groups_list("P-256").unwrap();
        let key = p256();
        builder
            .set_certificate(&self_signed("dtls-bench-device-00000", &key))
            .unwrap();
        builder.set_private_key(&key).unwrap();
    } else {
        builder.set_cipher_list("PSK-AES128-CCM8").unwrap();
        builder.set_psk_client_callback(|_, _, identity, psk| {
            identity[..IDENTITY.len()].copy_from_slice(IDENTITY);
            identity[IDENTITY.len()] = 0;
            psk[..KEY.len()].copy_from_slice(KEY);
            Ok(KEY.len())
        });
    }
    builder.build()
}

/// One handshake; the engine's time, the client and the server's session.
fn handshake(
    server: &DtlsServer,
    context: &SslContext,
    offer: Option<&SslSession>,
) -> (Duration, SslStream<Pipe>, Box<DtlsSession>) {
    let mut ssl = Ssl::new(context).unwrap();
    ssl.set_connect_state();
    ssl.set_mtu(1_400).unwrap();
    if let Some(session) = offer {
        // SAFETY: a session of a client of the same context
        unsafe { ssl.set_session(session).unwrap() };
    }
    let mut client = SslStream::new(ssl, Pipe::default()).unwrap();
    let mut session: Option<Box<DtlsSession>> = None;
    let mut spent = Duration::ZERO;
    loop {
        let done = match client.do_handshake() {
            Ok(()) => true,
            Err(error) if error.code() == ErrorCode::WANT_READ => false,
            Err(error) => panic!("client: {error}"),
        };
        for datagram in std::mem::take(&mut client.get_mut().outbox) {
            let start = Instant::now();
            let output = match session.as_mut() {
                None => match server.accept(PEER, &datagram) {
                    Accepted::HelloVerify(output) => output,
                    Accepted::Session(made, output) => {
                        session = Some(made);
                        output
                    }
                    Accepted::Dropped => panic!("dropped"),
                },
                Some(existing) => existing.feed(&datagram).output,
            };
            spent += start.elapsed();
            client.get_mut().inbox.extend(output);
        }
        if done && session.as_ref().is_some_and(|s| s.established()) {
            return (spent, client, session.unwrap());
        }
    }
}

fn handshakes(c: &mut Criterion) {
    let server = server();
    let mut group = c.benchmark_group("dtls handshake (server side)");
    group.sample_size(20);
    for (label, certificate) in [("psk", false), ("ecdhe-ecdsa p-256", true)] {
        let context = client(certificate);
        group.bench_function(format!("{label} full"), |b| {
            b.iter_custom(|n| (0..n).map(|_| handshake(&server, &context, None).0).sum())
        });
        // taken after the full handshakes above, which filled the cache and evicted older sessions
        let (_, mut first, _) = handshake(&server, &context, None);
        let offer = first.ssl().session().unwrap().to_owned();
        // freed without this, the client's SSL would mark its session (the offer) not resumable
        first.set_shutdown(ShutdownState::SENT | ShutdownState::RECEIVED);
        group.bench_function(format!("{label} resumed"), |b| {
            b.iter_custom(|n| {
                (0..n)
                    .map(|_| {
                        let (spent, mut client, session) =
                            handshake(&server, &context, Some(&offer));
                        assert!(session.session_reused());
                        client.set_shutdown(ShutdownState::SENT | ShutdownState::RECEIVED);
                        spent
                    })
                    .sum()
            })
        });
    }
    group.finish();
}

fn records(c: &mut Criterion) {
    let server = server();
    let (_, mut client, mut session) = handshake(&server, &client(false), None);
    let payload = [7u8; 80];
    let ack = [6u8; 16];
    c.bench_function("dtls record in (80 B) + out (16 B), server side", |b| {
        b.iter_custom(|n| {
            let mut spent = Duration::ZERO;
            for _ in 0..n {
                client.ssl_write(&payload).unwrap();
                let datagram = client.get_mut().outbox.pop().unwrap();
                let start = Instant::now();
                let fed = session.feed(&datagram);
                let out = session.send(&ack).unwrap();
                spent += start.elapsed();
                assert_eq!(fed.records.len(), 1);
                assert_eq!(out.len(), 1);
            }
            spent
        })
    });
}

criterion_group!(benches, handshakes, records);
criterion_main!(benches);
