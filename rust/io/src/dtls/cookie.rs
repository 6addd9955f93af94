//! Stateless HelloVerifyRequest cookies (RFC 6347 §4.2.1): an HMAC-SHA256 of the peer's address under a
//! per-server secret, so a ClientHello from a spoofed address costs the server one answer and no state.

use std::sync::OnceLock;

use openssl::error::ErrorStack;
use openssl::hash::MessageDigest;
use openssl::memcmp;
use openssl::pkey::{PKey, Private};
use openssl::sign::Signer;
use openssl::ssl::{Ssl, SslContextBuilder, SslRef};

/// The peer address a cookie binds, attached to each `SSL` for the cookie callbacks.
struct Peer(Vec<u8>);

fn peer_index() -> openssl::ex_data::Index<Ssl, Peer> {
    static INDEX: OnceLock<openssl::ex_data::Index<Ssl, Peer>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index().expect("an SSL ex_data index"))
}

/// Makes the context's cookie callbacks sign and check the peer's address under a fresh random secret.
pub(super) fn install(builder: &mut SslContextBuilder) -> Result<(), ErrorStack> {
    let mut secret = [0u8; 32];
    openssl::rand::rand_bytes(&mut secret)?;
    let secret = PKey::hmac(&secret)?;
    let cookie_secret = secret.clone();
    builder.set_cookie_generate_cb(move |ssl, out| {
        let mac = cookie(&cookie_secret, ssl)?;
        out[..mac.len()].copy_from_slice(&mac);
        Ok(mac.len())
    });
    builder.set_cookie_verify_cb(move |ssl, offered| {
        cookie(&secret, ssl)
            .is_ok_and(|mac| offered.len() == mac.len() && memcmp::eq(offered, &mac))
    });
    Ok(())
}

/// Binds the peer's address (as bytes) to an `SSL` about to listen, for its cookie.
pub(super) fn bind_peer(ssl: &mut SslRef, peer: &[u8]) {
    ssl.set_ex_data(peer_index(), Peer(peer.to_vec()));
}

fn cookie(secret: &PKey<Private>, ssl: &SslRef) -> Result<Vec<u8>, ErrorStack> {
    let peer = ssl
        .ex_data(peer_index())
        .map_or(&[][..], |peer| &peer.0[..]);
    let mut signer = Signer::new(MessageDigest::sha256(), secret)?;
    signer.update(peer)?;
    signer.sign_to_vec()
}
