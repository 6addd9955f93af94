//! The engine on memory pipes against an OpenSSL client: full and abbreviated handshakes, cookies, refusals,
//! garbage.

use super::*;
use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::pkey::Private;
use openssl::ssl::SslContextBuilder;
use openssl::ssl::{
    ErrorCode, ShutdownState, Ssl, SslContext, SslMethod, SslOptions, SslSession,
    SslSessionCacheMode, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509Name;
use openssl::x509::X509;

const PEER: &[u8] = b"127.0.0.1:40000";
const IDENTITY: &[u8] = b"dtls-device-00001";
const KEY: &[u8] = b"sixteen-byte-key";

pub(crate) fn p256() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

pub(crate) fn self_signed(cn: &str, key: &PKey<Private>) -> X509 {
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

fn server() -> DtlsServer {
    let key = p256();
    let certificate = self_signed("devicehub", &key);
    let server = DtlsServer::new(
        &certificate.to_der().unwrap(),
        &key.private_key_to_pkcs8().unwrap(),
        100,
        3_600,
    )
    .unwrap();
    server.set_psk(IDENTITY, KEY).unwrap();
    server
}

fn client_builder(cipher: &str) -> SslContextBuilder {
    let mut builder = SslContext::builder(SslMethod::dtls()).unwrap();
    builder
        .set_min_proto_version(Some(SslVersion::DTLS1_2))
        .unwrap();
    builder
        .set_max_proto_version(Some(SslVersion::DTLS1_2))
        .unwrap();
    builder.set_cipher_list(cipher).unwrap();
    builder.set_options(SslOptions::NO_TICKET | SslOptions::NO_QUERY_MTU);
    builder.set_session_cache_mode(SslSessionCacheMode::CLIENT);
    builder.set_verify(SslVerifyMode::NONE);
    builder
}

fn psk_client(identity: &'static [u8], key: &'static [u8]) -> SslContext {
    let mut builder = client_builder("PSK-AES128-CCM8");
    builder.set_psk_client_callback(move |_, _, id, psk| {
        id[..identity.len()].copy_from_slice(identity);
        id[identity.len()] = 0;
        psk[..key.len()].copy_from_slice(key);
        Ok(key.len())
    });
    builder.build()
}

fn certificate_client(cn: &str) -> (SslContext, Vec<u8>) {
    let key = p256();
    let certificate = self_signed(cn, &key);
    let mut builder = client_builder("ECDHE-ECDSA-AES128-CCM8");
    builder.set_certificate(&certificate).unwrap();
    builder.set_private_key(&key).unwrap();
    (builder.build(), certificate.to_der().unwrap())
}

struct Run {
    client: SslStream<Pipe>,
    session: Option<Box<DtlsSession>>,
    hello_verify: usize,
    /// The last flight the client sent (a full PSK handshake's: ClientKeyExchange, ChangeCipherSpec, Finished).
    last_flight: Vec<Vec<u8>>,
}

impl Drop for Run {
    /// A client `SSL` freed without close_notify marks its session not resumable (OpenSSL's
    /// `ssl_clear_bad_session`), and the offer a test keeps is that same session: end it cleanly.
    fn drop(&mut self) {
        self.client
            .set_shutdown(ShutdownState::SENT | ShutdownState::RECEIVED);
    }
}

/// Runs a handshake between a client of `context` (resuming `offer` if given) and `server`.
fn handshake(server: &DtlsServer, context: &SslContext, offer: Option<&SslSession>) -> Run {
    let mut ssl = Ssl::new(context).unwrap();
    ssl.set_connect_state();
    ssl.set_mtu(MTU).unwrap();
    if let Some(session) = offer {
        // SAFETY: the session came from a client of the same context
        unsafe { ssl.set_session(session).unwrap() };
    }
    let mut run = Run {
        client: SslStream::new(ssl, Pipe::default()).unwrap(),
        session: None,
        hello_verify: 0,
        last_flight: Vec::new(),
    };
    for _ in 0..16 {
        let client_done = match run.client.do_handshake() {
            Ok(()) => true,
            Err(error) if error.code() == ErrorCode::WANT_READ => false,
            Err(_) => return run,
        };
        let flight = std::mem::take(&mut run.client.get_mut().outbox);
        if !flight.is_empty() {
            run.last_flight.clone_from(&flight);
        }
        for datagram in flight {
            let output = match run.session.as_mut() {
                None => match server.accept(PEER, &datagram) {
                    Accepted::HelloVerify(output) => {
                        run.hello_verify += 1;
                        output
                    }
                    Accepted::Session(session, output) => {
                        run.session = Some(session);
                        output
                    }
                    Accepted::Dropped => panic!("the ClientHello was dropped"),
                },
                Some(session) => session.feed(&datagram).output,
            };
            run.client.get_mut().inbox.extend(output);
        }
        let server_done = run
            .session
            .as_ref()
            .is_some_and(|s| s.established() || s.failure().is_some());
        if client_done && server_done {
            break;
        }
    }
    run
}

fn exchange(run: &mut Run) {
    let session = run.session.as_mut().unwrap();
    run.client.ssl_write(b"</rd?ep=x>").unwrap();
    let up = std::mem::take(&mut run.client.get_mut().outbox);
    assert_eq!(up.len(), 1);
    let fed = session.feed(&up[0]);
    assert_eq!(fed.records, vec![b"</rd?ep=x>".to_vec()]);
    for datagram in session.send(b"2.01 Created").unwrap() {
        run.client.get_mut().inbox.push_back(datagram);
    }
    let mut buffer = [0u8; 64];
    let n = run.client.ssl_read(&mut buffer).unwrap();
    assert_eq!(&buffer[..n], b"2.01 Created");
}

#[test]
fn a_psk_client_handshakes_after_a_stateless_cookie_exchange_and_exchanges_records() {
    let server = server();
    let mut run = handshake(&server, &psk_client(IDENTITY, KEY), None);
    assert_eq!(run.hello_verify, 1);
    let session = run.session.as_ref().unwrap();
    assert!(session.established() && !session.session_reused());
    assert_eq!(session.cipher(), Some("TLS_PSK_WITH_AES_128_CCM_8"));
    assert_eq!(session.psk_identity(), Some(IDENTITY));
    assert_eq!(session.peer_certificate(), None);
    exchange(&mut run);
    let close = run.session.as_mut().unwrap().shutdown();
    assert!(!close.is_empty());
}

#[test]
fn a_hello_without_a_valid_cookie_is_answered_and_nothing_kept() {
    let server = server();
    let mut ssl = Ssl::new(&psk_client(IDENTITY, KEY)).unwrap();
    ssl.set_connect_state();
    ssl.set_mtu(MTU).unwrap();
    let mut client = SslStream::new(ssl, Pipe::default()).unwrap();
    let _ = client.do_handshake();
    let hello = client.get_mut().outbox.remove(0);
    let Accepted::HelloVerify(verify) = server.accept(PEER, &hello) else {
        panic!("no HelloVerifyRequest")
    };
    assert_eq!((verify.len(), verify[0][0], verify[0][13]), (1, 22, 3)); // handshake record, HelloVerifyRequest
    assert!(verify[0].len() <= hello.len() + 40, "no amplification");
    client.get_mut().inbox.extend(verify);
    let _ = client.do_handshake();
    let with_cookie = client.get_mut().outbox.remove(0);
    // the cookie binds the address: from another one it is answered again, not taken
    assert!(matches!(
        server.accept(b"127.0.0.1:40001", &with_cookie),
        Accepted::HelloVerify(_)
    ));
    assert!(matches!(
        server.accept(PEER, &with_cookie),
        Accepted::Session(..)
    ));
}

#[test]
fn a_psk_session_resumes_with_its_identity_until_its_tag_is_forgotten() {
    let server = server();
    let client = psk_client(IDENTITY, KEY);
    let first = handshake(&server, &client, None);
    let first_session = first.session.as_ref().unwrap();
    first_session.remember(&server, "psk:dtls-device-00001");
    assert_eq!(server.tagged_count(), 1);
    let offer = first.client.ssl().session().unwrap().to_owned();

    let mut second = handshake(&server, &client, Some(&offer));
    let resumed = second.session.as_ref().unwrap();
    assert!(
        resumed.established() && resumed.session_reused() && second.client.ssl().session_reused()
    );
    assert_eq!(resumed.psk_identity(), Some(IDENTITY));
    assert_eq!(resumed.cipher(), Some("TLS_PSK_WITH_AES_128_CCM_8"));
    exchange(&mut second);

    // the peer closes (close_notify, answered) and the session object goes: the cached session stays
    second.client.shutdown().unwrap();
    let close = std::mem::take(&mut second.client.get_mut().outbox);
    let session = second.session.as_mut().unwrap();
    let fed = session.feed(&close[0]);
    assert!(session.closed() && fed.records.is_empty() && fed.output.len() == 1);
    drop(second);
    let again = handshake(&server, &client, Some(&offer));
    assert!(again.session.as_ref().unwrap().session_reused());
    drop(again);

    assert_eq!(server.forget("psk:someone-else"), 0);
    assert_eq!(server.forget("psk:dtls-device-00001"), 1);
    assert_eq!(server.tagged_count(), 0);
    let third = handshake(&server, &client, Some(&offer));
    let full = third.session.as_ref().unwrap();
    assert!(full.established() && !full.session_reused());
}

#[test]
fn a_removed_psk_cannot_handshake_and_a_discarded_session_cannot_resume() {
    let server = server();
    let client = psk_client(IDENTITY, KEY);
    let first = handshake(&server, &client, None);
    first.session.as_ref().unwrap().discard(&server); // as when the caller refuses the identity
    let offer = first.client.ssl().session().unwrap().to_owned();
    assert!(server.remove_psk(IDENTITY) && server.psk_count() == 0);
    let second = handshake(&server, &client, Some(&offer));
    let refused = second.session.as_ref().unwrap();
    assert!(!refused.established() && !refused.session_reused());
    assert!(refused.failure().is_some());
    assert_eq!(refused.psk_identity(), Some(IDENTITY)); // what the peer offered, for the log
}

#[test]
fn a_wrong_key_fails_at_the_finished_instead_of_timing_out() {
    let server = server();
    let run = handshake(&server, &psk_client(IDENTITY, b"another-key-0016"), None);
    let session = run.session.as_ref().unwrap();
    assert!(!session.established());
    assert_eq!(
        session.failure(),
        Some("the peer's Finished did not verify")
    );
    assert_eq!(session.psk_identity(), Some(IDENTITY));
}

#[test]
fn a_certificate_client_is_taken_whatever_its_issuer_and_resumes_with_its_certificate() {
    let server = server();
    let (client, der) = certificate_client("dtls-device-00002");
    let first = handshake(&server, &client, None);
    let session = first.session.as_ref().unwrap();
    assert!(session.established());
    assert_eq!(session.cipher(), Some("TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8"));
    assert_eq!(session.peer_certificate(), Some(der.clone()));
    assert_eq!(session.psk_identity(), None);
    let offer = first.client.ssl().session().unwrap().to_owned();
    let second = handshake(&server, &client, Some(&offer));
    let resumed = second.session.as_ref().unwrap();
    assert!(resumed.session_reused());
    assert_eq!(resumed.peer_certificate(), Some(der));
}

#[test]
fn garbage_is_dropped_without_state_or_panic() {
    let server = server();
    let mut noise = vec![0u8; 2_000];
    openssl::rand::rand_bytes(&mut noise).unwrap();
    for length in [0, 1, 13, 26, 100, 1_999] {
        assert!(matches!(
            server.accept(PEER, &noise[..length]),
            Accepted::Dropped
        ));
    }
    // a ClientHello header over garbage, truncated hellos, and an oversized datagram
    let mut fake = noise.clone();
    fake[..14].copy_from_slice(&[22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0x07, 0xc0, 1]);
    assert!(matches!(server.accept(PEER, &fake), Accepted::Dropped));
    assert!(matches!(
        server.accept(PEER, &vec![22; MAX_DATAGRAM + 1]),
        Accepted::Dropped
    ));
    let mut run = handshake(&server, &psk_client(IDENTITY, KEY), None);
    let session = run.session.as_mut().unwrap();
    for length in [0, 1, 13, 64, 1_999] {
        let fed = session.feed(&noise[..length]);
        assert!(fed.records.is_empty());
    }
    let mut record = noise[..60].to_vec();
    record[..13].copy_from_slice(&[23, 0xfe, 0xfd, 0, 1, 0, 0, 0, 0, 0, 9, 0, 47]); // epoch 1 app data, bad MAC
    assert!(session.feed(&record).records.is_empty());
    assert!(!session.closed());
    assert!(matches!(
        session.send(&vec![0; MAX_PLAINTEXT + 1]),
        Err(DtlsError::TooLarge)
    ));
    exchange(&mut run); // the session still works
}

#[test]
fn psk_table_bounds() {
    let server = server();
    assert!(server.set_psk(b"", KEY).is_err());
    assert!(server.set_psk(IDENTITY, &[0; MAX_PSK + 1]).is_err());
    assert!(!server.remove_psk(b"nobody"));
}

#[test]
fn a_full_cache_evicts_the_oldest_sessions_and_keeps_the_newest_resumable() {
    let server = server(); // 100 sessions
    let client = psk_client(IDENTITY, KEY);
    let oldest = handshake(&server, &client, None);
    oldest
        .session
        .as_ref()
        .unwrap()
        .remember(&server, "psk:oldest");
    let oldest_offer = oldest.client.ssl().session().unwrap().to_owned();
    for _ in 0..150 {
        handshake(&server, &client, None);
    }
    assert_eq!(server.tagged_count(), 0); // its eviction untagged it
    let newest = handshake(&server, &client, None);
    let offer = newest.client.ssl().session().unwrap().to_owned();
    let resumed = handshake(&server, &client, Some(&offer));
    assert!(resumed.session.as_ref().unwrap().session_reused());
    let full = handshake(&server, &client, Some(&oldest_offer));
    assert!(!full.session.as_ref().unwrap().session_reused());
}

#[test]
fn a_session_without_buffers_takes_a_retransmitted_flight_and_still_exchanges_records() {
    // issue 28 #4: an established session frees its record buffers between datagrams; a late copy of the peer's
    // last handshake flight (epoch 0 and 1 records), records both ways, a record out first and a close_notify
    // each find them back
    let server = server();
    let mut run = handshake(&server, &psk_client(IDENTITY, KEY), None);
    let session = run.session.as_mut().unwrap();
    assert!(session.established());
    for datagram in run.last_flight.clone() {
        let fed = session.feed(&datagram);
        assert!(fed.records.is_empty() && !session.closed() && session.failure().is_none());
    }
    exchange(&mut run); // a record in, then one out
    let out = run
        .session
        .as_mut()
        .unwrap()
        .send(b"a write first")
        .unwrap(); // no read before it
    run.client.get_mut().inbox.extend(out);
    let mut buffer = [0u8; 64];
    let n = run.client.ssl_read(&mut buffer).unwrap();
    assert_eq!(&buffer[..n], b"a write first");
    exchange(&mut run);
    let close = run.session.as_mut().unwrap().shutdown(); // close_notify: a write too
    assert_eq!(close.len(), 1);
}
