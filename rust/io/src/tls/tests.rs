//! The TLS engine's server against its own client on byte pipes (PSK, certificate, refusals, records both ways,
//! close_notify), and the DTLS client against the DTLS server, its lost flight retransmitted on the timer.

use super::*;
use crate::dtls::tests::{p256, self_signed};
use crate::dtls::{Accepted, DtlsServer};

const IDENTITY: &[u8] = b"tls-device-000001";
const KEY: &[u8] = b"sixteen-byte-key";

fn der_pair() -> (Vec<u8>, Vec<u8>) {
    let key = p256();
    let certificate = self_signed("devicehub", &key);
    (
        certificate.to_der().unwrap(),
        key.private_key_to_pkcs8().unwrap(),
    )
}

fn server() -> TlsServer {
    let (certificate, key) = der_pair();
    let server = TlsServer::new(&certificate, &key).unwrap();
    server.set_psk(IDENTITY, KEY).unwrap();
    server
}

/// Passes bytes back and forth until neither side has any to send.
fn run(client: &mut TlsSession, server: &mut TlsSession) {
    let mut to_server = client.start();
    for _ in 0..10 {
        let fed = server.feed(&to_server);
        let to_client = fed.output;
        if to_client.is_empty() {
            return;
        }
        to_server = client.feed(&to_client).output;
        if to_server.is_empty() {
            return;
        }
    }
}

fn psk_client(identity: &[u8], key: &[u8]) -> TlsSession {
    let connector = TlsConnector::new().unwrap();
    connector
        .connect(&ClientCredential::Psk { identity, key })
        .unwrap()
}

#[test]
fn a_psk_client_handshakes_and_records_go_both_ways_in_any_chunking() {
    let tls = server();
    let (mut client, mut session) = (psk_client(IDENTITY, KEY), tls.accept().unwrap());
    run(&mut client, &mut session);
    assert!(client.established() && session.established());
    assert_eq!(session.psk_identity(), Some(IDENTITY));
    assert_eq!(session.cipher(), Some("TLS_PSK_WITH_AES_128_CCM_8"));
    let big = vec![7u8; 40_000]; // three records
    let wire = client.send(&big);
    let mut got = Vec::new();
    for chunk in wire.chunks(1_000) {
        got.extend(session.feed(chunk).plaintext);
    }
    assert_eq!(got, big);
    let back = session.send(b"answer");
    assert_eq!(client.feed(&back).plaintext, b"answer");
}

#[test]
fn an_unknown_identity_and_a_wrong_key_fail_the_handshake_with_the_identity_offered() {
    let tls = server();
    let (mut client, mut session) = (
        psk_client(b"stranger-device-01", KEY),
        tls.accept().unwrap(),
    );
    run(&mut client, &mut session);
    assert!(!session.established() && session.failure().is_some());
    assert_eq!(session.psk_identity(), Some(&b"stranger-device-01"[..]));
    let (mut client, mut session) = (
        psk_client(IDENTITY, b"another-key-16by"),
        tls.accept().unwrap(),
    );
    run(&mut client, &mut session);
    assert!(!session.established() && session.failure().is_some());
    assert_eq!(session.psk_identity(), Some(IDENTITY));
}

#[test]
fn a_certificate_client_is_taken_and_its_certificate_handed_over() {
    let tls = server();
    let key = p256();
    let certificate = self_signed("cert-device-0001", &key);
    let (certificate_pem, key_pem) = (
        certificate.to_pem().unwrap(),
        key.private_key_to_pem_pkcs8().unwrap(),
    );
    let credential = ClientCredential::Certificate {
        certificate_pem: &certificate_pem,
        key_pem: &key_pem,
    };
    let client = TlsConnector::new().unwrap().connect(&credential);
    let (mut client, mut session) = (client.unwrap(), tls.accept().unwrap());
    run(&mut client, &mut session);
    assert!(session.established());
    assert_eq!(session.psk_identity(), None);
    assert_eq!(
        session.peer_certificate(),
        Some(certificate.to_der().unwrap())
    );
}

#[test]
fn one_connector_serves_many_identities_and_refuses_an_empty_or_over_long_psk() {
    let tls = server();
    tls.set_psk(b"tls-device-000002", KEY).unwrap();
    let connector = TlsConnector::new().unwrap();
    for identity in [IDENTITY, b"tls-device-000002"] {
        let credential = ClientCredential::Psk { identity, key: KEY };
        let (mut client, mut session) = (
            connector.connect(&credential).unwrap(),
            tls.accept().unwrap(),
        );
        run(&mut client, &mut session);
        assert!(session.established());
        assert_eq!(session.psk_identity(), Some(identity));
    }
    let empty = ClientCredential::Psk {
        identity: b"",
        key: KEY,
    };
    assert!(connector.connect(&empty).is_err());
    let long = ClientCredential::Psk {
        identity: IDENTITY,
        key: &[1; 65],
    };
    assert!(connector.connect(&long).is_err());
}

#[test]
fn close_notify_is_answered_and_closes_both_ends() {
    let tls = server();
    let (mut client, mut session) = (psk_client(IDENTITY, KEY), tls.accept().unwrap());
    run(&mut client, &mut session);
    let notify = client.shutdown();
    let fed = session.feed(&notify);
    assert!(session.closed() && !fed.output.is_empty());
    assert!(session.send(b"late").is_empty());
}

#[test]
fn garbage_fails_the_handshake_without_panic() {
    let tls = server();
    let mut session = tls.accept().unwrap();
    session.feed(&[22, 3, 3, 0, 5, 1, 2, 3, 4, 5]);
    assert!(session.failure().is_some() && !session.established());
    assert!(session.feed(b"more").output.is_empty());
}

#[test]
fn a_dtls_client_handshakes_with_the_dtls_server_and_retransmits_a_lost_flight() {
    let (certificate, key) = der_pair();
    let dtls = DtlsServer::new(&certificate, &key, 10, 60).unwrap();
    dtls.set_psk(IDENTITY, KEY).unwrap();
    let connector = DtlsConnector::new().unwrap();
    let credential = ClientCredential::Psk {
        identity: IDENTITY,
        key: KEY,
    };
    let (mut client, hello) = connector.connect(&credential, None).unwrap();
    assert!(client.timeout().is_some_and(|left| left.as_secs() <= 1)); // RFC 6347 §4.2.4.1: 1 s at first
    let Accepted::HelloVerify(verify) = dtls.accept(b"peer", &hello[0]) else {
        panic!("no HelloVerifyRequest");
    };
    let hello = client.feed(&verify[0]).output;
    let Accepted::Session(mut session, flight) = dtls.accept(b"peer", &hello[0]) else {
        panic!("no session");
    };
    let mut to_server = Vec::new();
    for datagram in &flight {
        to_server.extend(client.feed(datagram).output);
    }
    // the client's last flight is lost: the timer runs out and it comes again
    std::thread::sleep(client.timeout().unwrap());
    let again = client.handle_timeout();
    assert!(!to_server.is_empty() && !again.is_empty());
    let mut to_client = Vec::new();
    for datagram in &again {
        to_client.extend(session.feed(datagram).output);
    }
    for datagram in &to_client {
        client.feed(datagram);
    }
    assert!(client.established() && session.established());
    assert_eq!(client.timeout(), None);
    let record = client.send(b"coap").unwrap();
    assert_eq!(session.feed(&record[0]).records, [b"coap".to_vec()]);
}

fn ring_key(seed: u8) -> Vec<u8> {
    (0..80u8).map(|i| i.wrapping_mul(31) ^ seed).collect()
}

#[test]
fn a_tls_client_offering_its_session_resumes_by_ticket_on_a_server_sharing_the_ring() {
    // issue 31 #5: the TLS listener's tickets, now offered by this client too (the bench times the abbreviated
    // handshake); a server without the ring's key answers a full handshake
    let ring = ring_key(7);
    let (first, second, stranger) = (server(), server(), server());
    first.set_ticket_keys(&[&ring]).unwrap();
    second.set_ticket_keys(&[&ring]).unwrap();
    stranger.set_ticket_keys(&[&ring_key(8)]).unwrap();
    let connector = TlsConnector::new().unwrap();
    let credential = ClientCredential::Psk {
        identity: IDENTITY,
        key: KEY,
    };
    let (mut client, mut session) = (
        connector.connect(&credential).unwrap(),
        first.accept().unwrap(),
    );
    assert_eq!(client.resumable(), None); // before the handshake
    run(&mut client, &mut session);
    assert!(client.established() && !client.session_reused());
    let offer = client.resumable().expect("a session with its ticket");
    for (tls, resumes) in [(&second, true), (&stranger, false)] {
        let mut client = connector
            .connect_offering(&credential, Some(&offer))
            .unwrap();
        let mut session = tls.accept().unwrap();
        run(&mut client, &mut session);
        assert!(client.established() && session.established());
        assert_eq!(
            (client.session_reused(), session.session_reused()),
            (resumes, resumes)
        );
        assert_eq!(session.psk_identity(), Some(IDENTITY));
    }
    let mut client = connector
        .connect_offering(&credential, Some(b"not a session"))
        .unwrap();
    let mut session = second.accept().unwrap();
    run(&mut client, &mut session);
    assert!(client.established() && !client.session_reused()); // an offer that does not decode is not made
}
