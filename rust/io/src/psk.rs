//! The PSK table a server's OpenSSL callback consults (identity → key), shared by the DTLS and the TLS server: the
//! caller sets and removes entries as its keyring changes; a handshake reads the table as it stands.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use openssl::ssl::SslContextBuilder;

/// The largest key: 512 bits, the largest Pelion's API accepts.
pub const MAX_PSK: usize = 64;

/// Identity → key, behind a lock the PSK callback reads under.
#[derive(Clone, Default)]
pub struct PskTable(Arc<RwLock<HashMap<Vec<u8>, Vec<u8>>>>);

/// An empty identity or key, or a key longer than [`MAX_PSK`].
#[derive(Debug, thiserror::Error)]
#[error("a PSK is at most {MAX_PSK} bytes and its identity is not empty")]
pub struct BadPsk;

impl PskTable {
    /// Sets the key of an identity (a new one, or a new key).
    pub fn set(&self, identity: &[u8], key: &[u8]) -> Result<(), BadPsk> {
        if identity.is_empty() || key.is_empty() || key.len() > MAX_PSK {
            return Err(BadPsk);
        }
        let mut table = self.0.write().unwrap_or_else(|p| p.into_inner());
        table.insert(identity.to_vec(), key.to_vec());
        Ok(())
    }

    /// Removes an identity; true if it was there.
    pub fn remove(&self, identity: &[u8]) -> bool {
        let mut table = self.0.write().unwrap_or_else(|p| p.into_inner());
        table.remove(identity).is_some()
    }

    /// The key of an identity, if the table holds it.
    pub fn get(&self, identity: &[u8]) -> Option<Vec<u8>> {
        let table = self.0.read().unwrap_or_else(|p| p.into_inner());
        table.get(identity).cloned()
    }

    /// How many identities the table holds.
    pub fn len(&self) -> usize {
        self.0.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The table holds no identity.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes the context's server PSK callback look the offered identity up here. An unknown identity gets no key,
    /// so OpenSSL sends the unknown_psk_identity alert (RFC 4279 §2).
    pub fn install(&self, builder: &mut SslContextBuilder) {
        let table = self.clone();
        builder.set_psk_server_callback(move |_, identity, psk| {
            let Some(identity) = identity else {
                return Ok(0);
            };
            let table = table.0.read().unwrap_or_else(|p| p.into_inner());
            match table.get(identity) {
                Some(key) if key.len() <= psk.len() => {
                    psk[..key.len()].copy_from_slice(key);
                    Ok(key.len())
                }
                _ => Ok(0),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_identity_an_empty_key_or_a_key_over_512_bits_is_refused() {
        let table = PskTable::default();
        assert!(table.set(b"", b"key").is_err());
        assert!(table.set(b"id", b"").is_err());
        assert!(table.set(b"id", &[0; MAX_PSK + 1]).is_err());
        assert!(table.set(b"id", &[0; MAX_PSK]).is_ok());
        assert_eq!(table.len(), 1);
        assert!(table.remove(b"id") && !table.remove(b"id"));
        assert!(table.is_empty());
    }
}
