//! The JetStream backend's settings: servers, TLS and credentials, stream options, and
//! the names it gives topics and consumers.

use std::path::PathBuf;

use super::super::{LogError, LogLimits};

/// Default prefix of stream names and subjects.
pub const DEFAULT_PREFIX: &str = "wharf";
/// Default time a delivered record may stay unacknowledged before JetStream redelivers it.
/// Records of a reader that died come again sooner, when its replacement opens the
/// consumer (see "Redelivery"); this timeout catches a reader that hangs while alive and
/// deliveries or acks that a killed nats-server lost (2.9 loses consumer acks on SIGKILL,
/// which otherwise stalls a consumer at `max_ack_pending` for the whole wait). A sink whose
/// put and flush of one batch take longer than this sees that batch again (at least once).
pub const DEFAULT_ACK_WAIT_MS: u64 = 20_000;
/// Default timeout of one JetStream API request (publish ack, create, double ack).
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Longest name token kept before a hash replaces the rest.
const MAX_TOKEN_CHARS: usize = 48;

/// Options of the JetStream backend.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JetStreamOptions {
    /// Replicas of each stream (1 for a single server, 3 or 5 in a cluster).
    pub replicas: usize,
    /// Prefix of stream names (upper-cased) and subjects (as given); letters, digits, `-`, `_`.
    pub prefix: String,
    /// Milliseconds a delivered record may stay unacknowledged before redelivery.
    pub ack_wait_ms: u64,
    /// Milliseconds one JetStream request may take.
    pub request_timeout_ms: u64,
    /// Fetch and in-flight bounds.
    pub limits: LogLimits,
    /// Retention of each new stream: how long a record is kept, in seconds; 0 keeps it
    /// for ever (JetStream's `max_age` 0, the default). `?max_age_s=N` in the spec.
    pub max_age_s: u64,
    /// Retention of each new stream: most bytes kept, the oldest records removed first;
    /// -1 for no bound (JetStream's `max_bytes` -1, the default). `?max_bytes=N`.
    pub max_bytes: i64,
}

/// Settings of the NATS JetStream record log (`--record-log nats://...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsConfig {
    /// Server URLs (`nats://HOST:PORT`, or `tls://HOST:PORT` for TLS), tried in turn.
    pub servers: Vec<String>,
    /// TLS and credentials of the connection (docs/security.md).
    pub security: NatsSecurity,
    /// Naming, replication, timeouts and bounds.
    pub options: JetStreamOptions,
}

impl NatsConfig {
    /// `servers` with the default options, without TLS or credentials.
    pub fn new(servers: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            servers: servers.into_iter().map(Into::into).collect(),
            security: NatsSecurity::default(),
            options: JetStreamOptions::default(),
        }
    }

    /// Reads the NATS form of a record-log spec: server URLs separated by commas
    /// (`nats://` or `tls://`), then optionally `?replicas=N` (1 to 5), `max_age_s=N`
    /// and `max_bytes=N` joined by `&`.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming the server or the option that is wrong.
    pub(in crate::log) fn from_spec(spec: &str, security: NatsSecurity) -> Result<Self, LogError> {
        let (urls, query) = spec.split_once('?').unwrap_or((spec, ""));
        let mut config = Self {
            security,
            ..Self::new(urls.split(',').map(str::trim))
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("replicas", n)) => {
                    config.options.replicas = n.parse().map_err(|_| {
                        LogError::InvalidConfig(format!("replicas must be 1..=5, got {n:?}"))
                    })?;
                }
                Some(("max_age_s", n)) => {
                    config.options.max_age_s = n.parse().map_err(|_| {
                        LogError::InvalidConfig(format!(
                            "max_age_s must be a number of seconds (0: kept for ever), got {n:?}"
                        ))
                    })?;
                }
                Some(("max_bytes", n)) => {
                    config.options.max_bytes = n.parse().map_err(|_| {
                        LogError::InvalidConfig(format!(
                            "max_bytes must be a number of bytes (-1: no bound), got {n:?}"
                        ))
                    })?;
                }
                _ => {
                    return Err(LogError::InvalidConfig(format!(
                        "unknown record log option {pair:?} (known: replicas, max_age_s, max_bytes)"
                    )));
                }
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the options and that every server is a NATS URL (`nats://` or `tls://`; an
    /// entry without a scheme is taken as `nats://`).
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming what is wrong.
    pub(super) fn validate(&self) -> Result<(), LogError> {
        self.options.validate()?;
        if self.servers.is_empty() {
            return Err(LogError::InvalidConfig("no NATS server given".into()));
        }
        for server in &self.servers {
            let scheme_ok = !server.is_empty()
                && (!server.contains("://")
                    || server.starts_with("nats://")
                    || server.starts_with("tls://"));
            let parsed = server.parse::<async_nats::ServerAddr>();
            // The NATS client reads `nats://` as a server without a host.
            let has_host = parsed.as_ref().is_ok_and(|a| !a.host().is_empty());
            if let (true, Ok(_), true) = (scheme_ok, &parsed, has_host) {
                continue;
            }
            let why = match parsed {
                Err(e) => e.to_string(),
                Ok(_) if scheme_ok => "no host".to_owned(),
                Ok(_) => "not a nats:// or tls:// server URL".to_owned(),
            };
            return Err(LogError::InvalidConfig(format!(
                "NATS URL {server:?}: {why}"
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for NatsConfig {
    /// The spec form, without secrets: `nats://a:4222,nats://b:4222?replicas=3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.servers.join(","))?;
        let defaults = JetStreamOptions::default();
        let mut options = Vec::new();
        if self.options.replicas != defaults.replicas {
            options.push(format!("replicas={}", self.options.replicas));
        }
        if self.options.max_age_s != defaults.max_age_s {
            options.push(format!("max_age_s={}", self.options.max_age_s));
        }
        if self.options.max_bytes != defaults.max_bytes {
            options.push(format!("max_bytes={}", self.options.max_bytes));
        }
        if !options.is_empty() {
            write!(f, "?{}", options.join("&"))?;
        }
        Ok(())
    }
}

/// TLS and credentials of the NATS connection (`--nats-cacert`, `--nats-cert`,
/// `--nats-key`, `--nats-creds`, `--nats-user`). Files are read at each connect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsSecurity {
    /// PEM CA of the server's certificate; set, the client requires TLS whatever the
    /// URL's scheme.
    pub ca: Option<PathBuf>,
    /// PEM client certificate and key, for a server with `verify: true`.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// How the client authenticates, if at all.
    pub credentials: Option<NatsCredentials>,
}

/// NATS authentication.
#[derive(Clone, PartialEq, Eq)]
pub enum NatsCredentials {
    /// A `.creds` file (JWT and NKey seed, as `nsc` writes it).
    CredsFile(PathBuf),
    /// A user and its password (never shown: Debug prints a placeholder).
    UserPassword {
        /// User name.
        user: String,
        /// Its password.
        password: String,
    },
}

impl std::fmt::Debug for NatsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsCredentials::CredsFile(path) => f.debug_tuple("CredsFile").field(path).finish(),
            NatsCredentials::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &wharf::sdk::REDACTED)
                .finish(),
        }
    }
}

impl NatsSecurity {
    /// Whether any TLS material is configured.
    pub fn tls(&self) -> bool {
        self.ca.is_some() || self.client_cert.is_some()
    }

    /// `options` with TLS and credentials applied.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming `--nats-creds` when the file cannot be read.
    pub(super) async fn apply(
        &self,
        mut options: async_nats::ConnectOptions,
    ) -> Result<async_nats::ConnectOptions, LogError> {
        if let Some(ca) = &self.ca {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some((cert, key)) = &self.client_cert {
            options = options
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        match &self.credentials {
            None => Ok(options),
            Some(NatsCredentials::UserPassword { user, password }) => {
                Ok(options.user_and_password(user.clone(), password.clone()))
            }
            Some(NatsCredentials::CredsFile(path)) => {
                options.credentials_file(path).await.map_err(|e| {
                    LogError::InvalidConfig(format!("--nats-creds {}: {e}", path.display()))
                })
            }
        }
    }
}

/// What to add to a failed connect's message: a server that requires TLS reached
/// without any TLS setting fails its handshake against the system roots.
pub(super) fn connect_hint(security: &NatsSecurity) -> &'static str {
    if security.tls() {
        ""
    } else {
        " (if the NATS server requires TLS, give its CA with --nats-cacert, and --nats-cert/--nats-key when it verifies clients)"
    }
}

impl Default for JetStreamOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            prefix: DEFAULT_PREFIX.to_string(),
            ack_wait_ms: DEFAULT_ACK_WAIT_MS,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            limits: LogLimits::default(),
            max_age_s: 0,
            max_bytes: -1,
        }
    }
}

impl JetStreamOptions {
    /// Rejects out-of-range options, naming the field.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`].
    pub fn validate(&self) -> Result<(), LogError> {
        self.limits.validate()?;
        if self.max_bytes < -1 || self.max_bytes == 0 {
            return Err(LogError::InvalidConfig(format!(
                "max_bytes must be -1 (no bound) or a positive number of bytes, got {}",
                self.max_bytes
            )));
        }
        if !(1..=5).contains(&self.replicas) {
            return Err(LogError::InvalidConfig(format!(
                "replicas must be 1..=5, got {}",
                self.replicas
            )));
        }
        if self.prefix.is_empty()
            || !self
                .prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(LogError::InvalidConfig(format!(
                "prefix must be letters, digits, '-' or '_', got {:?}",
                self.prefix
            )));
        }
        if self.ack_wait_ms == 0 || self.request_timeout_ms == 0 {
            return Err(LogError::InvalidConfig(
                "ack_wait_ms and request_timeout_ms must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// A name usable as a NATS stream/consumer name and subject token, whatever `name` is:
/// ASCII letters, digits, `-` and `_` are kept, anything else becomes `_`; when that
/// changed the name or it is longer than 48 characters, the kept part is cut to 48 and
/// `-` plus 16 hex digits of a stable 64-bit FNV-1a hash of the original are appended,
/// so distinct names never share a token in practice. Empty names hash too.
pub fn name_token(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned == name && !name.is_empty() && name.len() <= MAX_TOKEN_CHARS {
        return cleaned;
    }
    let kept: String = cleaned.chars().take(MAX_TOKEN_CHARS).collect();
    format!("{kept}-{:016x}", fnv1a64(name.as_bytes()))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_nats_tokens_and_distinct() {
        for name in [
            "plain",
            "with.dot",
            "a b",
            "*",
            ">",
            "",
            "ü",
            &"x".repeat(300),
        ] {
            let token = name_token(name);
            assert!(!token.is_empty() && token.len() <= 48 + 17, "{token}");
            assert!(
                token
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{token}"
            );
        }
        assert_eq!(name_token("wharf-sink-orders"), "wharf-sink-orders");
        assert_ne!(name_token("a.b"), name_token("a_b"));
        assert_ne!(name_token("a.b"), name_token("a*b"));
    }
}
