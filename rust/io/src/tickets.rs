//! Session tickets (RFC 5077) under a key ring the caller shares between nodes (issue 31 #5): any node holding the
//! ring resumes a session another node (or this one before a restart) established, and no node stores anything per
//! session.
//!
//! - The ring: the first key encrypts new tickets, every key decrypts; a ticket under a key other than the first is
//!   renewed (a new ticket under the first key goes with the abbreviated handshake). The caller rotates it on a
//!   schedule (a new key enters as the next one before it becomes the first, so a node that has not yet seen the
//!   rotation still decrypts the tickets of one that has) and installs it with [`TicketKeys::set`]. No key: no
//!   ticket issued, none accepted.
//! - A key is 80 bytes: its 16-byte name (sent in the clear at the ticket's head, RFC 5077 §4's `key_name`), 32 of
//!   HMAC-SHA256 key and 32 of AES-256-CBC key (OpenSSL's ticket format).
//! - A ticket could not be withdrawn, so a PSK session's ticket carries (in its encrypted application data) the
//!   identity and a digest of the key it was established with; the ticket resumes only while the PSK table holds
//!   that identity with that key: a revoked or rotated PSK gets a full handshake instead. A certificate session's
//!   ticket carries its certificate; the caller judges it again on every handshake, resumed or not.

use std::sync::{Arc, OnceLock, RwLock};

use openssl::ex_data::Index;
use openssl::sha::sha256;
use openssl::ssl::{SslContext, SslContextBuilder, SslRef};

use crate::dtls::ffi;
use crate::psk::PskTable;

/// The bytes of one key: name, HMAC key, AES key.
pub const TICKET_KEY_LEN: usize = 16 + 32 + 32;

/// A ring key that is not [`TICKET_KEY_LEN`] bytes, or two keys of one name.
#[derive(Debug, thiserror::Error)]
#[error("a ticket key is {TICKET_KEY_LEN} bytes (name, HMAC key, AES key) and its name is unique in the ring")]
pub struct BadTicketKey;

/// One key of the ring, split.
#[derive(Clone)]
pub(crate) struct TicketKey {
    pub(crate) name: [u8; 16],
    pub(crate) hmac: [u8; 32],
    pub(crate) aes: [u8; 32],
}

/// The ring, shared with the context's ticket callbacks: the first key encrypts, all decrypt.
#[derive(Clone, Default)]
pub struct TicketKeys(Arc<RwLock<Vec<TicketKey>>>);

impl TicketKeys {
    /// Installs a ring: `keys[0]` encrypts new tickets, all decrypt; empty: no tickets.
    pub fn set(&self, keys: &[&[u8]]) -> Result<(), BadTicketKey> {
        let mut ring = Vec::with_capacity(keys.len());
        for key in keys {
            let key: &[u8; TICKET_KEY_LEN] = (*key).try_into().map_err(|_| BadTicketKey)?;
            let (name, rest) = key.split_at(16);
            let (hmac, aes) = rest.split_at(32);
            let key = TicketKey {
                name: name.try_into().map_err(|_| BadTicketKey)?,
                hmac: hmac.try_into().map_err(|_| BadTicketKey)?,
                aes: aes.try_into().map_err(|_| BadTicketKey)?,
            };
            if ring.iter().any(|each: &TicketKey| each.name == key.name) {
                return Err(BadTicketKey);
            }
            ring.push(key);
        }
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = ring;
        Ok(())
    }

    /// How many keys the ring holds.
    pub fn len(&self) -> usize {
        self.0.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The ring holds no key: tickets are off.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key new tickets are encrypted under.
    pub(crate) fn encrypting(&self) -> Option<TicketKey> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .first()
            .cloned()
    }

    /// The key named `name`, and whether a ticket under it is to be renewed (it is not the encrypting key).
    pub(crate) fn decrypting(&self, name: &[u8]) -> Option<(TicketKey, bool)> {
        let ring = self.0.read().unwrap_or_else(|p| p.into_inner());
        let position = ring.iter().position(|key| key.name == name)?;
        Some((ring[position].clone(), position > 0))
    }
}

/// What a context's ticket callbacks consult: the ring, and the PSK table a PSK ticket is checked against.
pub(crate) struct Resumption {
    pub(crate) keys: TicketKeys,
    psks: PskTable,
}

fn index() -> Index<SslContext, Resumption> {
    static INDEX: OnceLock<Index<SslContext, Resumption>> = OnceLock::new();
    *INDEX.get_or_init(|| SslContext::new_ex_index().expect("an SSL_CTX ex_data index"))
}

/// Makes a server context issue and take tickets under `keys`, a PSK ticket only while `psks` holds its key.
pub(crate) fn install(builder: &mut SslContextBuilder, keys: TicketKeys, psks: PskTable) {
    builder.set_ex_data(index(), Resumption { keys, psks });
    ffi::install_ticket_callbacks(builder);
}

/// The ring and table of the context `ssl` belongs to (for the callbacks).
pub(crate) fn of(ssl: &SslRef) -> Option<&Resumption> {
    ssl.ssl_context().ex_data(index())
}

/// A PSK binding starts with this byte; a certificate session's ticket carries no binding.
const PSK: u8 = b'P';

impl Resumption {
    /// What a new ticket of `ssl`'s session carries: for a PSK session, the identity and a digest of its key now.
    pub(crate) fn binding(&self, ssl: &SslRef) -> Vec<u8> {
        let Some(identity) = ssl.psk_identity() else {
            return Vec::new();
        };
        let digest = self
            .psks
            .get(identity)
            .map(|key| sha256(&key))
            .unwrap_or_default(); // no key: binds to none
        let mut binding = Vec::with_capacity(1 + digest.len() + identity.len());
        binding.push(PSK);
        binding.extend_from_slice(&digest);
        binding.extend_from_slice(identity);
        binding
    }

    /// A decrypted ticket's binding still holds: not a PSK one, or its identity has the same key now.
    pub(crate) fn still_bound(&self, binding: &[u8]) -> bool {
        match binding.split_first() {
            None => true,
            Some((&PSK, rest)) if rest.len() > 32 => {
                let (digest, identity) = rest.split_at(32);
                self.psks
                    .get(identity)
                    .is_some_and(|key| sha256(&key) == digest)
            }
            Some(_) => false,
        }
    }
}

#[cfg(test)]
mod tests;
