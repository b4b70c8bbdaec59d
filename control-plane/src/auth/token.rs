//! Bearer tokens: minting, hashing, and the token file the control plane reloads when it
//! changes on disk.
//!
//! A token is `wharf_` followed by 32 random bytes (256 bits) in unpadded base64url. The
//! file keeps only `sha256:<hex>` of each token: a token that high in entropy cannot be
//! guessed from its hash, so a plain SHA-256 suffices (a slow password hash such as argon2
//! only helps against guessing low-entropy secrets, and would cost every admin call), and
//! the file leaks nothing that lets a reader call the API. See docs/security.md.
//!
//! The file is TOML, one line per token, keyed by the token's name (names are unique):
//! ```toml
//! alice = { role = "operator", hash = "sha256:9f86d0..." }
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tracing::{error, info};

use super::Role;

/// Prefix of every minted token (so that a leaked one is recognisable in a scan).
pub const TOKEN_PREFIX: &str = "wharf_";
/// Random bytes in a minted token.
pub const TOKEN_RANDOM_BYTES: usize = 32;
/// Prefix of a stored hash.
pub const HASH_PREFIX: &str = "sha256:";

/// One token's entry in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenEntry {
    /// The principal's name (the TOML key).
    pub name: String,
    /// Its role.
    pub role: Role,
}

/// The tokens of one version of the file, by hash.
#[derive(Debug, Clone, Default)]
pub struct TokenSet {
    by_hash: HashMap<String, TokenEntry>,
}

impl TokenSet {
    /// The entry whose hash is the hash of `token`.
    pub fn lookup(&self, token: &str) -> Option<&TokenEntry> {
        self.by_hash.get(&hash_token(token))
    }

    /// How many tokens the file holds.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether the file holds no token.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// It cannot be read.
    #[error("admin token file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// It is not a valid token file; `message` names the entry or TOML line.
    #[error("admin token file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and where.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    role: String,
    hash: String,
}

/// `sha256:<64 lowercase hex digits>` of `token`.
pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let mut out = String::with_capacity(HASH_PREFIX.len() + 64);
    out.push_str(HASH_PREFIX);
    for b in digest.iter() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// A new random token (see the module doc for its shape).
pub fn mint_token() -> String {
    let bytes: [u8; TOKEN_RANDOM_BYTES] = rand::random();
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// Whether `name` may name a token: 1 to 128 of `A-Z a-z 0-9 . _ @ -` (it is a bare TOML
/// key, and it appears in the audit trail).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'))
}

/// The file line for a token named `name` with `role` (hash of `token`).
pub fn file_line(name: &str, role: Role, token: &str) -> String {
    format!(
        "{} = {{ role = \"{role}\", hash = \"{}\" }}",
        toml_key(name),
        hash_token(token)
    )
}

fn toml_key(name: &str) -> String {
    // A bare key cannot hold '.' or '@'; quote those (the characters allowed need no escape).
    if name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        name.to_owned()
    } else {
        format!("\"{name}\"")
    }
}

/// Parses a token file's text.
///
/// # Errors
/// A message naming the TOML line or the entry that is wrong.
pub fn parse(text: &str) -> Result<TokenSet, String> {
    let raw: HashMap<String, RawEntry> = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut set = TokenSet::default();
    let mut names: Vec<&String> = raw.keys().collect();
    names.sort();
    for name in names {
        let e = &raw[name];
        if !valid_name(name) {
            return Err(format!(
                "token name {name:?}: use 1 to 128 of A-Z a-z 0-9 . _ @ -"
            ));
        }
        let role: Role = e
            .role
            .parse()
            .map_err(|m| format!("token {name:?}: role {m}"))?;
        let hex = e.hash.strip_prefix(HASH_PREFIX).unwrap_or_default();
        if hex.len() != 64 || !hex.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')) {
            return Err(format!(
                "token {name:?}: hash must be {HASH_PREFIX}<64 lowercase hex digits> (from `wharf-control-plane token`)"
            ));
        }
        if let Some(other) = set.by_hash.get(&e.hash) {
            return Err(format!(
                "tokens {:?} and {name:?} have the same hash",
                other.name
            ));
        }
        set.by_hash.insert(
            e.hash.clone(),
            TokenEntry {
                name: name.clone(),
                role,
            },
        );
    }
    Ok(set)
}

/// Reads and parses the token file at `path`.
///
/// # Errors
/// [`TokenFileError`].
pub fn load(path: &Path) -> Result<TokenSet, TokenFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|message| TokenFileError::Invalid {
        path: path.to_owned(),
        message,
    })
}

/// What identifies one version of the file on disk: a write changes one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: u64,
    #[cfg(unix)]
    ctime_ns: i64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    use std::os::unix::fs::MetadataExt;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        #[cfg(unix)]
        inode: m.ino(),
        #[cfg(unix)]
        ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
    })
}

/// The token file, reloaded when it changes: every [`TokenFile::current`] compares the
/// file's metadata (mtime, size, inode, ctime) with the version it holds, one `stat` per
/// admin call, so an added token works and a removed one is refused from the next call
/// on, without a restart and without a polling delay.
///
/// Fails closed: a file that has become unreadable or invalid yields no tokens (every
/// token is refused, logged at ERROR) until it is fixed.
pub struct TokenFile {
    path: PathBuf,
    state: Mutex<(Option<Stamp>, Arc<TokenSet>)>,
}

impl TokenFile {
    /// Loads `path` (it must exist and be valid at start).
    ///
    /// # Errors
    /// [`TokenFileError`].
    pub fn open(path: &Path) -> Result<Self, TokenFileError> {
        let before = stamp(path);
        let set = load(path)?;
        info!(file = %path.display(), tokens = set.len(), "admin tokens loaded");
        Ok(Self {
            path: path.to_owned(),
            state: Mutex::new((before, Arc::new(set))),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tokens of the file as it is now.
    pub fn current(&self) -> Arc<TokenSet> {
        let now = stamp(&self.path);
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.0 != now {
            let set = match load(&self.path) {
                Ok(set) => {
                    info!(file = %self.path.display(), tokens = set.len(), "admin tokens reloaded");
                    set
                }
                Err(e) => {
                    error!(error = %e, "admin tokens not reloaded: every bearer token is refused until the file is fixed");
                    TokenSet::default()
                }
            };
            *state = (now, Arc::new(set));
        }
        state.1.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_is_found_by_its_file_line_and_nothing_else_is() {
        let token = mint_token();
        assert!(token.starts_with(TOKEN_PREFIX));
        assert_eq!(token.len(), TOKEN_PREFIX.len() + 43);
        let set = parse(&file_line("alice", Role::Operator, &token)).expect("parses");
        assert_eq!(
            set.lookup(&token),
            Some(&TokenEntry {
                name: "alice".into(),
                role: Role::Operator
            })
        );
        assert_eq!(set.lookup(&mint_token()), None);
        assert_eq!(set.lookup(""), None);
    }

    #[test]
    fn the_file_holds_the_hash_not_the_token() {
        let token = mint_token();
        let line = file_line("bob@example.com", Role::Admin, &token);
        assert!(!line.contains(&token));
        assert!(line.contains(&hash_token(&token)));
        assert!(parse(&line).is_ok(), "{line}");
    }

    #[test]
    fn the_hash_is_sha256_hex() {
        assert_eq!(
            hash_token("test"),
            "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
    }

    #[test]
    fn a_bad_entry_is_refused_naming_it() {
        let e = parse("alice = { role = \"root\", hash = \"sha256:00\" }").expect_err("role");
        assert!(e.contains("alice") && e.contains("root"), "{e}");
        let e = parse("alice = { role = \"admin\", hash = \"md5:00\" }").expect_err("hash");
        assert!(e.contains("alice") && e.contains("hash"), "{e}");
        let e = parse("alice = { role = \"admin\" }").expect_err("missing hash");
        assert!(e.contains("hash"), "{e}");
        let h = hash_token("x");
        let two = format!(
            "a = {{ role = \"admin\", hash = \"{h}\" }}\nb = {{ role = \"viewer\", hash = \"{h}\" }}"
        );
        assert!(parse(&two).expect_err("same hash").contains("same hash"));
    }

    #[test]
    fn an_empty_file_holds_no_token() {
        assert!(parse("").expect("empty").is_empty());
    }

    #[test]
    fn changes_on_disk_are_seen_on_the_next_lookup_and_a_broken_file_fails_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokens.toml");
        let (a, b) = (mint_token(), mint_token());
        std::fs::write(&path, file_line("a", Role::Viewer, &a)).expect("write");
        let file = TokenFile::open(&path).expect("opens");
        assert!(file.current().lookup(&a).is_some());
        assert!(file.current().lookup(&b).is_none());
        std::fs::write(
            &path,
            format!(
                "{}\n{}\n",
                file_line("a", Role::Viewer, &a),
                file_line("b", Role::Admin, &b)
            ),
        )
        .expect("write");
        assert_eq!(file.current().lookup(&b).map(|e| e.role), Some(Role::Admin));
        std::fs::write(&path, file_line("b", Role::Admin, &b)).expect("write");
        assert!(file.current().lookup(&a).is_none());
        std::fs::write(&path, "not toml at all [").expect("write");
        assert!(file.current().is_empty());
        std::fs::remove_file(&path).expect("rm");
        assert!(file.current().is_empty());
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("alice"));
        assert!(valid_name("ci-bot.prod@team_a"));
        assert!(!valid_name(""));
        assert!(!valid_name("a b"));
        assert!(!valid_name("a\"b"));
    }
}
