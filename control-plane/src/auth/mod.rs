//! Admin authentication and authorization: who is calling ([`authenticate`]) and whether
//! their role may do what they ask ([`authorize`]). Both are plain functions over plain
//! data (an `http::HeaderMap`, an optional peer identity, a snapshot of the token file),
//! so every adapter of the admin API (gRPC here, the Kafka Connect REST gateway) asks the
//! same questions and no rule exists twice. The gRPC adapter calls them once per RPC in
//! [`crate::grpc::guard`]; the audit trail is in [`audit`].
//!
//! Design and operator guide: docs/security.md (admin authentication, roles, tokens,
//! audit trail).

pub mod audit;
mod authn;
mod roles;
pub mod token;

pub use authn::{
    AuthError, AuthMethod, Credentials, FORWARDED_PRINCIPAL_HEADER, PeerIdentity, Principal,
    authenticate, forwarded_principal_value, peer_identity,
};
pub use roles::{AdminAction, Decision, DeleteMode, Role, authorize, cleanup_policy_role};

use crate::model::AuditRetention;

/// The admin authentication settings of one control plane.
#[derive(Debug, Clone, Default)]
pub struct AuthSettings {
    /// `--admin-tokens`: the token file (None: no bearer tokens).
    pub admin_tokens: Option<std::path::PathBuf>,
    /// Whether client certificates are verified against a CA (set by the TLS settings).
    pub client_certs: bool,
    /// `--insecure`: allow a non-loopback listen address without any authentication.
    pub insecure: bool,
    /// How much of the audit trail is kept.
    pub audit_retention: AuditRetention,
}

/// What the admin API checks callers with, for the process's lifetime.
pub struct AdminAuth {
    tokens: Option<token::TokenFile>,
    client_certs: bool,
    /// Nonce of the next audit entry id: random start (replicas differ), then counting,
    /// so that entries of one process in the same millisecond keep their order.
    nonce: std::sync::atomic::AtomicU64,
    /// How much of the audit trail is kept.
    pub retention: AuditRetention,
    /// When an unauthenticated refusal was last logged, and how many were not since.
    unauthenticated_log: std::sync::Mutex<wharf::throttle::Throttle>,
    /// Each identified caller's refusals in the current window
    /// ([`audit::REFUSALS_RECORDED_PER_MINUTE`]), by the entry's principal. Callers are
    /// bounded by the token file and the certificates our CA signed.
    refusals: std::sync::Mutex<std::collections::HashMap<String, audit::RefusalWindow>>,
}

impl AdminAuth {
    /// Opens the token file, if any.
    ///
    /// # Errors
    /// [`token::TokenFileError`] when the file is missing or invalid at start.
    pub fn new(settings: &AuthSettings) -> Result<Self, token::TokenFileError> {
        let tokens = match &settings.admin_tokens {
            Some(p) => Some(token::TokenFile::open(p)?),
            None => None,
        };
        Ok(Self {
            tokens,
            client_certs: settings.client_certs,
            nonce: std::sync::atomic::AtomicU64::new(first_nonce()),
            retention: settings.audit_retention,
            unauthenticated_log: std::sync::Mutex::default(),
            refusals: std::sync::Mutex::default(),
        })
    }

    /// No authentication at all (dev mode), every caller is an admin.
    pub fn open() -> Self {
        Self {
            tokens: None,
            client_certs: false,
            nonce: std::sync::atomic::AtomicU64::new(first_nonce()),
            retention: AuditRetention::default(),
            unauthenticated_log: std::sync::Mutex::default(),
            refusals: std::sync::Mutex::default(),
        }
    }

    /// The nonce for the next audit entry's id.
    pub fn next_nonce(&self) -> u64 {
        self.nonce
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The credentials as of now (the token file re-read if it changed).
    pub fn credentials(&self) -> Credentials {
        Credentials {
            tokens: self.tokens.as_ref().map(token::TokenFile::current),
            client_certs: self.client_certs,
        }
    }

    /// Who is calling (from `headers` and the verified certificate identity `peer`) and
    /// may they make `action`: the principal, or the refusal together with the principal
    /// when it did authenticate. Every admin adapter (gRPC, REST) calls this first.
    ///
    /// # Errors
    /// [`AuthError`]: UNAUTHENTICATED or PERMISSION_DENIED.
    pub fn admit(
        &self,
        headers: &http::HeaderMap,
        peer: Option<&PeerIdentity>,
        action: AdminAction,
    ) -> Result<Principal, (Option<Principal>, AuthError)> {
        let principal = authenticate(headers, peer, &self.credentials()).map_err(|e| (None, e))?;
        match authorize(principal.role, action) {
            Decision::Allow => Ok(principal),
            Decision::Deny { needed } => {
                let detail = match action {
                    AdminAction::DeleteConnector(m) => format!(" with mode {}", m.as_str()),
                    _ => String::new(),
                };
                let e = AuthError::Forbidden {
                    principal: principal.to_string(),
                    rpc: action.rpc(),
                    detail,
                    needed,
                };
                Err((Some(principal), e))
            }
        }
    }

    /// Counts a call refused because the caller presented no valid credentials (not in
    /// the trail: [`audit::in_trail`]) in `wharf_admin_calls_unauthenticated_total`, and
    /// logs it at WARN if no such line was written in the last
    /// [`audit::UNAUTHENTICATED_LOG_INTERVAL`]; the line says how many were refused
    /// without a line since the previous one. `remote` is the caller's address, `rpc`
    /// and `connector` (cut: [`audit::bounded_name`]) what it asked for.
    pub fn refused_unauthenticated(
        &self,
        remote: Option<std::net::SocketAddr>,
        rpc: &str,
        connector: &str,
        error: &AuthError,
    ) {
        crate::observe::admin_call_unauthenticated();
        let due = wharf::throttle::Throttle::note_shared(
            &self.unauthenticated_log,
            audit::UNAUTHENTICATED_LOG_INTERVAL,
        );
        if let Some(silenced) = due {
            tracing::warn!(
                target: audit::AUDIT_TARGET,
                peer = %remote.map_or_else(|| "-".to_owned(), |a| a.to_string()),
                rpc,
                connector = %audit::bounded_name(connector),
                error = %error,
                refused_without_a_line_since_the_last = silenced,
                "admin call refused: no valid credentials (not in the audit trail; counted in wharf_admin_calls_unauthenticated_total; next such line in {} s at the earliest)",
                audit::UNAUTHENTICATED_LOG_INTERVAL.as_secs()
            );
        }
    }

    /// The fate of caller `name`'s answer `outcome` under its refusal budget
    /// ([`audit::refusal_fate`]), its window moved on.
    fn refusal_fate(&self, name: &str, outcome: &str) -> audit::RefusalFate {
        let mut refusals = self
            .refusals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (fate, window) = audit::refusal_fate(
            refusals.get(name).copied(),
            std::time::Instant::now(),
            audit::is_budgeted_refusal(outcome),
        );
        refusals.insert(name.to_owned(), window);
        fate
    }

    /// Records a mutating `action`'s outcome in the audit trail (store and log; see
    /// [`audit::record`]), `connector` and `message` bounded ([`audit::bounded`]), with
    /// who called ([`audit::who`]: the principal, or the peer
    /// certificate of a refused caller); does nothing for a read. `outcome` is `OK` or
    /// the status code's name, `message` the status message (empty when OK),
    /// `forwarded_by` the follower that forwarded the call (or empty).
    pub fn record(
        &self,
        store: &dyn crate::store::StateStore,
        (principal, peer): (Option<&Principal>, Option<&PeerIdentity>),
        action: AdminAction,
        connector: &str,
        (outcome, message): (&str, &str),
        forwarded_by: &str,
    ) {
        if !action.is_mutating() {
            return;
        }
        let time_ms = crate::reconcile::now_ms();
        let (name, role, auth_method) = audit::who(principal, peer);
        let mut message = audit::bounded(message, audit::MAX_AUDIT_MESSAGE_BYTES).into_owned();
        match self.refusal_fate(&name, outcome) {
            audit::RefusalFate::Recorded { left_out_before: 0 } => {}
            audit::RefusalFate::Recorded { left_out_before } => {
                if !message.is_empty() {
                    message.push(' ');
                }
                message.push_str(&format!(
                    "[{left_out_before} earlier refused calls of this caller not recorded: over {} a minute]",
                    audit::REFUSALS_RECORDED_PER_MINUTE
                ));
            }
            audit::RefusalFate::LeftOut { first } => {
                crate::observe::admin_refusal_not_recorded();
                if first {
                    tracing::warn!(
                        target: audit::AUDIT_TARGET,
                        principal = %name,
                        rpc = action.rpc(),
                        "over {} refused admin calls of one caller this minute: the rest of the minute's refusals are not in the audit trail (counted in wharf_admin_refusals_not_recorded_total; its next entry says how many)",
                        audit::REFUSALS_RECORDED_PER_MINUTE
                    );
                }
                return;
            }
        }
        let entry = crate::model::AuditEntry {
            id: crate::model::AuditEntry::id_for(time_ms, self.next_nonce()),
            time_ms,
            principal: name,
            role,
            auth_method,
            rpc: action.rpc().to_owned(),
            connector: audit::bounded_name(connector).into_owned(),
            deletion_mode: match action {
                AdminAction::DeleteConnector(m) => m.as_str().to_owned(),
                _ => String::new(),
            },
            outcome: outcome.to_owned(),
            message,
            forwarded_by: forwarded_by.to_owned(),
        };
        audit::record(store, &self.retention, &entry);
    }
}

/// A random start for the audit nonce, with room below `u64::MAX` to count up.
fn first_nonce() -> u64 {
    rand::random::<u64>() >> 1
}
