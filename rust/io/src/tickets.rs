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
//!   ticket carries a digest of its certificate's issuer name, and resumes only while the caller lists that name
//!   among the CAs it trusts ([`TicketIssuers`]): a removed CA's sessions get a full handshake, refused like any
//!   other. The caller still judges the resumed certificate (carried in the ticket) on every handshake.

use std::collections::HashSet;
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

/// The subject names (DER) of the CAs whose certificates' tickets may resume, as SHA-256 digests.
#[derive(Clone, Default)]
pub struct TicketIssuers(Arc<RwLock<HashSet<[u8; 32]>>>);

impl TicketIssuers {
    /// Replaces the list: the DER subject names of the CAs trusted now.
    pub fn set(&self, subjects: &[&[u8]]) {
        let digests = subjects.iter().map(|subject| sha256(subject)).collect();
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = digests;
    }

    fn holds(&self, digest: &[u8]) -> bool {
        let issuers = self.0.read().unwrap_or_else(|p| p.into_inner());
        <[u8; 32]>::try_from(digest).is_ok_and(|digest| issuers.contains(&digest))
    }
}

/// What a context's ticket callbacks consult: the ring, the PSK table a PSK ticket is checked against, the issuers
/// a certificate ticket is.
pub(crate) struct Resumption {
    pub(crate) keys: TicketKeys,
    psks: PskTable,
    issuers: TicketIssuers,
}

fn index() -> Index<SslContext, Resumption> {
    static INDEX: OnceLock<Index<SslContext, Resumption>> = OnceLock::new();
    *INDEX.get_or_init(|| SslContext::new_ex_index().expect("an SSL_CTX ex_data index"))
}

/// Makes a server context issue and take tickets under `keys`, a PSK ticket only while `psks` holds its key, a
/// certificate ticket only while `issuers` lists its issuer.
pub(crate) fn install(
    builder: &mut SslContextBuilder,
    keys: TicketKeys,
    psks: PskTable,
    issuers: TicketIssuers,
) {
    let resumption = Resumption {
        keys,
        psks,
        issuers,
    };
    builder.set_ex_data(index(), resumption);
    ffi::install_ticket_callbacks(builder);
}

/// The ring and table of the context `ssl` belongs to (for the callbacks).
pub(crate) fn of(ssl: &SslRef) -> Option<&Resumption> {
    ssl.ssl_context().ex_data(index())
}

/// A PSK binding starts with this byte, a certificate binding with the other.
const PSK: u8 = b'P';
const CERTIFICATE: u8 = b'C';

impl Resumption {
    /// What a new ticket of `ssl`'s session carries: for a PSK session, the identity and a digest of its key now;
    /// for a certificate session, a digest of its issuer's name; else nothing (no ticket resumes without a binding).
    pub(crate) fn binding(&self, ssl: &SslRef) -> Vec<u8> {
        let Some(identity) = ssl.psk_identity() else {
            let issuer = ssl
                .peer_certificate()
                .and_then(|certificate| certificate.issuer_name().to_der().ok());
            return issuer.map_or_else(Vec::new, |issuer| {
                let mut binding = vec![CERTIFICATE];
                binding.extend_from_slice(&sha256(&issuer));
                binding
            });
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

    /// A decrypted ticket's binding still holds: its PSK identity has the same key now, or its certificate's issuer
    /// is still listed.
    pub(crate) fn still_bound(&self, binding: &[u8]) -> bool {
        match binding.split_first() {
            Some((&PSK, rest)) if rest.len() > 32 => {
                let (digest, identity) = rest.split_at(32);
                self.psks
                    .get(identity)
                    .is_some_and(|key| sha256(&key) == digest)
            }
            Some((&CERTIFICATE, digest)) => self.issuers.holds(digest),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests;
