//! Encryption at rest for store records, so that secret config values (a database
//! password) never appear in clear text in the store file.
//!
//! XChaCha20-Poly1305 (crate `chacha20poly1305`, RustCrypto) with a random 24-byte nonce
//! per record; the 32-byte key lives in `<data-dir>/store.key`, created on first start
//! with mode 0600. Protection therefore holds against a copy of the store file alone
//! (a backup, a support bundle), not against someone who can read the whole data dir.

use std::io::Write;
use std::path::Path;

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};

use super::StoreError;

/// File name of the key inside `--data-dir`.
pub const KEY_FILE_NAME: &str = "store.key";
const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;

/// Encrypts and decrypts store values.
pub struct Sealer {
    cipher: XChaCha20Poly1305,
}

/// A sealed value did not decrypt (wrong key or damaged file).
#[derive(Debug, thiserror::Error)]
#[error("sealed store value does not decrypt with the key in store.key")]
pub struct OpenFailed;

/// What the start does about `store.key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFate {
    /// The file is there: load it.
    Load,
    /// A new data dir: make a new random key.
    Create,
    /// The file is gone but the store holds records sealed with it: a new key would
    /// open none of them, so the start is refused and nothing is written.
    RefuseMissing,
}

/// Decides [`KeyFate`] from whether `store.key` exists and whether the store already
/// holds records (for the embedded store: `state.redb` exists and is not empty).
pub fn key_fate(key_present: bool, store_holds_records: bool) -> KeyFate {
    match (key_present, store_holds_records) {
        (true, _) => KeyFate::Load,
        (false, false) => KeyFate::Create,
        (false, true) => KeyFate::RefuseMissing,
    }
}

impl Sealer {
    /// Loads the key from `dir/store.key`, creating it (mode 0600) when absent.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the key file cannot be read or written, or has
    /// the wrong length.
    pub fn load_or_create(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join(KEY_FILE_NAME);
        let key = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key: [u8; KEY_LEN] = rand::random();
                let tmp = dir.join(format!("{KEY_FILE_NAME}.tmp"));
                let mut opts = std::fs::OpenOptions::new();
                opts.write(true).create(true).truncate(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
                let mut f = opts.open(&tmp).map_err(|e| {
                    StoreError::Unavailable(format!("create {}: {e}", tmp.display()))
                })?;
                f.write_all(&key).and_then(|()| f.sync_all()).map_err(|e| {
                    StoreError::Unavailable(format!("write {}: {e}", tmp.display()))
                })?;
                std::fs::rename(&tmp, &path).map_err(|e| {
                    StoreError::Unavailable(format!("rename to {}: {e}", path.display()))
                })?;
                key.to_vec()
            }
            Err(e) => {
                return Err(StoreError::Unavailable(format!(
                    "read {}: {e}",
                    path.display()
                )));
            }
        };
        if key.len() != KEY_LEN {
            return Err(StoreError::Unavailable(format!(
                "{} holds {} bytes, expected {KEY_LEN}",
                path.display(),
                key.len()
            )));
        }
        Ok(Self {
            cipher: XChaCha20Poly1305::new(Key::from_slice(&key)),
        })
    }

    /// Nonce followed by ciphertext.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] if encryption fails (it does not for in-memory input).
    pub fn seal(&self, plain: &[u8]) -> Result<Vec<u8>, StoreError> {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let ct = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), plain)
            .map_err(|_| StoreError::Unavailable("encrypting a store value failed".into()))?;
        let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Reverses [`Sealer::seal`].
    ///
    /// # Errors
    /// [`OpenFailed`] when the value is damaged or was sealed with another key.
    pub fn open(&self, sealed: &[u8]) -> Result<Vec<u8>, OpenFailed> {
        if sealed.len() < NONCE_LEN {
            return Err(OpenFailed);
        }
        let (nonce, ct) = sealed.split_at(NONCE_LEN);
        self.cipher
            .decrypt(XNonce::from_slice(nonce), ct)
            .map_err(|_| OpenFailed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_present_key_is_loaded_whatever_the_store_holds() {
        assert_eq!(key_fate(true, false), KeyFate::Load);
        assert_eq!(key_fate(true, true), KeyFate::Load);
    }

    #[test]
    fn a_new_data_dir_gets_a_new_key() {
        assert_eq!(key_fate(false, false), KeyFate::Create);
    }

    #[test]
    fn a_missing_key_beside_stored_records_is_refused() {
        assert_eq!(key_fate(false, true), KeyFate::RefuseMissing);
    }
}
