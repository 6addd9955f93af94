//! Tickets between the engine's own DTLS client and servers sharing (or not) a key ring: a session resumes on any
//! server holding the key it was sealed under, renewed under a rotated ring; a PSK ticket no longer resumes once its
//! identity's key changed or went; a certificate ticket resumes with its certificate while its issuer is trusted.

use crate::dtls::tests::{p256, self_signed};
use crate::dtls::{Accepted, DtlsServer, DtlsSession, Peer, PskServer};
use crate::tls::{ClientCredential, DtlsConnector};

const IDENTITY: &[u8] = b"ticket-device-001";
const KEY: &[u8] = b"sixteen-byte-key";
const PSK: ClientCredential<'static> = ClientCredential::Psk {
    identity: IDENTITY,
    key: KEY,
};

fn ring_key(seed: u8) -> Vec<u8> {
    (0..80u8).map(|i| i.wrapping_mul(31) ^ seed).collect()
}

/// A server with the PSK and a ring of these keys, its own cache (sessions IDs do not cross servers).
fn server(ring: &[Vec<u8>]) -> DtlsServer {
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
    let keys: Vec<&[u8]> = ring.iter().map(Vec::as_slice).collect();
    server.set_ticket_keys(&keys).unwrap();
    server
}

/// A handshake of a client offering `offer` against `server`: (client, server side), both as far as they got.
fn connect(
    server: &DtlsServer,
    credential: &ClientCredential<'_>,
    offer: Option<&[u8]>,
) -> (Box<DtlsSession>, Option<Box<DtlsSession>>) {
    let connector = DtlsConnector::new().unwrap();
    let (mut client, mut to_server) = connector.connect(credential, offer).unwrap();
    let mut accepted: Option<Box<DtlsSession>> = None;
    for _ in 0..12 {
        let mut to_client = Vec::new();
        for datagram in to_server.drain(..) {
            match accepted.as_mut() {
                Some(session) => to_client.extend(session.feed(&datagram).output),
                None => match server.accept(b"127.0.0.1:5684", &datagram) {
                    Accepted::HelloVerify(out) => to_client.extend(out),
                    Accepted::Session(session, out) => {
                        accepted = Some(session);
                        to_client.extend(out);
                    }
                    Accepted::Dropped => panic!("hello dropped"),
                },
            }
        }
        for datagram in to_client {
            to_server.extend(client.feed(&datagram).output);
        }
        if to_server.is_empty() {
            break;
        }
    }
    (client, accepted)
}

fn established(server: &DtlsServer, offer: Option<&[u8]>) -> (Box<DtlsSession>, Box<DtlsSession>) {
    let (client, accepted) = connect(server, &PSK, offer);
    let accepted = accepted.unwrap();
    assert!(
        client.established() && accepted.established(),
        "{:?}",
        accepted.failure()
    );
    (client, accepted)
}

#[test]
fn a_session_resumes_on_another_server_sharing_the_ring_and_not_on_one_without_it() {
    let ring = [ring_key(1)];
    let (first, _) = established(&server(&ring), None);
    let offer = first.resumable().unwrap();
    let (client, resumed) = established(&server(&ring), Some(&offer)); // another node, another cache
    assert!(resumed.session_reused() && client.session_reused());
    assert_eq!(resumed.psk_identity(), Some(IDENTITY));
    let (_, full) = established(&server(&[ring_key(2)]), Some(&offer));
    assert!(!full.session_reused());
    let (_, none) = established(&server(&[]), Some(&offer)); // no ring: no tickets
    assert!(!none.session_reused());
}

#[test]
fn a_ticket_under_the_previous_key_resumes_and_is_renewed_under_the_current_one() {
    let (first, _) = established(&server(&[ring_key(1)]), None);
    let offer = first.resumable().unwrap();
    let rotated = server(&[ring_key(2), ring_key(1)]);
    let (client, resumed) = established(&rotated, Some(&offer));
    assert!(resumed.session_reused());
    let renewed = client.resumable().unwrap();
    assert_ne!(renewed, offer);
    let (_, again) = established(&server(&[ring_key(2)]), Some(&renewed)); // the old key gone
    assert!(again.session_reused());
}

#[test]
fn a_psk_ticket_does_not_resume_once_its_key_changed_or_its_identity_went() {
    let ring = [ring_key(1)];
    let (first, _) = established(&server(&ring), None);
    let offer = first.resumable().unwrap();

    let rotated = server(&ring);
    rotated.set_psk(IDENTITY, b"a-new-key-016-by").unwrap();
    let new_key = ClientCredential::Psk {
        identity: IDENTITY,
        key: b"a-new-key-016-by",
    };
    let (client, full) = connect(&rotated, &new_key, Some(&offer));
    let full = full.unwrap();
    assert!(client.established() && full.established() && !full.session_reused());

    let revoked = server(&ring);
    assert!(revoked.remove_psk(IDENTITY));
    let (client, refused) = connect(&revoked, &PSK, Some(&offer));
    assert!(!client.established());
    let refused = refused.unwrap();
    assert!(!refused.established() && !refused.session_reused() && refused.failure().is_some());
}

#[test]
fn a_certificate_ticket_resumes_on_another_server_while_its_issuer_is_trusted() {
    let ring = [ring_key(1)];
    let key = p256();
    let certificate = self_signed("ticket-device-002", &key);
    let (certificate_pem, key_pem) = (
        certificate.to_pem().unwrap(),
        key.private_key_to_pem_pkcs8().unwrap(),
    );
    let credential = ClientCredential::Certificate {
        certificate_pem: &certificate_pem,
        key_pem: &key_pem,
    };
    let issuer = certificate.issuer_name().to_der().unwrap();
    let trusting = || {
        let server = server(&ring);
        server.set_ticket_issuers(&[&issuer]);
        server
    };
    let (first, _) = connect(&trusting(), &credential, None);
    let offer = first.resumable().unwrap();
    let (client, resumed) = connect(&trusting(), &credential, Some(&offer));
    let resumed = resumed.unwrap();
    assert!(client.established() && resumed.session_reused());
    assert_eq!(
        resumed.peer_certificate(),
        Some(certificate.to_der().unwrap())
    );
    // its CA no longer trusted: a full handshake (which the caller then judges, and refuses)
    let (_, full) = connect(&server(&ring), &credential, Some(&offer));
    assert!(!full.unwrap().session_reused());
}

#[test]
fn a_ring_key_is_80_bytes_with_a_unique_name() {
    let server = server(&[]);
    assert!(server.set_ticket_keys(&[&[0; 79]]).is_err());
    assert!(server
        .set_ticket_keys(&[&ring_key(1), &ring_key(1)])
        .is_err());
    assert!(server
        .set_ticket_keys(&[&ring_key(1), &ring_key(2)])
        .is_ok());
    assert_eq!(server.ticket_key_count(), 2);
    assert!(DtlsConnector::new()
        .unwrap()
        .connect(&PSK, Some(b"not a session"))
        .is_ok()); // not offered
}
