//! What both engines' sessions tell of their peer, and the PSK table both servers share, each written once over
//! the session's `SSL` or the server's table.

use openssl::ssl::SslRef;

use crate::dtls::DtlsError;
use crate::psk::PskTable;

/// A (D)TLS session's peer, as its `SSL` knows it (a resumed session's from the session it resumed).
pub trait Peer {
    /// The session's `SSL`.
    fn ssl(&self) -> &SslRef;

    /// The negotiated suite's IANA name (`TLS_PSK_WITH_AES_128_CCM_8`).
    fn cipher(&self) -> Option<&'static str> {
        self.ssl()
            .current_cipher()
            .and_then(|cipher| cipher.standard_name())
    }

    /// The PSK identity the peer offered (also during a failed handshake), or of the resumed session.
    fn psk_identity(&self) -> Option<&[u8]> {
        self.ssl().psk_identity()
    }

    /// The peer's certificate as DER (kept in the session: a resumed session has it too).
    fn peer_certificate(&self) -> Option<Vec<u8>> {
        self.ssl()
            .peer_certificate()
            .and_then(|certificate| certificate.to_der().ok())
    }
}

/// A server with a PSK table the caller keeps.
pub trait PskServer {
    /// The table its PSK callback consults.
    fn psks(&self) -> &PskTable;

    /// Sets the key of a PSK identity (a new one, or a new key).
    fn set_psk(&self, identity: &[u8], key: &[u8]) -> Result<(), DtlsError> {
        self.psks().set(identity, key).map_err(|_| DtlsError::Psk)
    }

    /// Removes a PSK identity; true if it was there.
    fn remove_psk(&self, identity: &[u8]) -> bool {
        self.psks().remove(identity)
    }

    /// How many PSK identities the table holds.
    fn psk_count(&self) -> usize {
        self.psks().len()
    }
}
