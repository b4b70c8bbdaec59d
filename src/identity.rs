//! Identities bound to certificates: one SPIFFE-style URI SAN per certificate
//! (`spiffe://<trust-domain>/...`, the convention of SPIFFE X.509-SVIDs). The format is
//! documented in `docs/security.md`:
//!
//! | who                | URI SAN                                        |
//! |--------------------|------------------------------------------------|
//! | control plane      | `spiffe://wharf/control-plane`                 |
//! | executor           | `spiffe://wharf/executor/<executor-id>`        |
//! | admin client       | `spiffe://wharf/role/<viewer|operator|admin>/<name>` |
//!
//! Parsing is pure: [`Identity::parse_uri`] for the string, [`Identity::from_cert_der`]
//! for a DER certificate (the one a TLS peer presented; its chain was verified by rustls
//! before the handler runs).

use std::fmt;

/// Default trust domain (the authority part of every identity URI).
pub const DEFAULT_TRUST_DOMAIN: &str = "wharf";

/// Scheme of every identity URI.
const SCHEME: &str = "spiffe://";

/// An admin client's role, least privilege first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AdminRole {
    /// Reads and watches.
    Viewer,
    /// Also creates, updates, pauses, resumes, stops, restarts and deletes with cleanup.
    Operator,
    /// Everything, including forced deletions and offset changes.
    Admin,
}

impl AdminRole {
    /// The role's name as it appears in the URI (`viewer`, `operator`, `admin`).
    pub fn as_str(self) -> &'static str {
        match self {
            AdminRole::Viewer => "viewer",
            AdminRole::Operator => "operator",
            AdminRole::Admin => "admin",
        }
    }

    /// Parses `viewer`, `operator` or `admin`.
    ///
    /// # Errors
    /// [`IdentityError::UnknownRole`].
    pub fn parse(s: &str) -> Result<Self, IdentityError> {
        match s {
            "viewer" => Ok(AdminRole::Viewer),
            "operator" => Ok(AdminRole::Operator),
            "admin" => Ok(AdminRole::Admin),
            other => Err(IdentityError::UnknownRole(other.to_owned())),
        }
    }
}

/// Who a certificate says its holder is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// The control plane (any replica).
    ControlPlane,
    /// The executor with this id.
    Executor(String),
    /// An admin client with a role and a name (the name is for the audit trail).
    Admin {
        /// Its role.
        role: AdminRole,
        /// Its name.
        name: String,
    },
}

/// Why a certificate or URI names no identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The certificate has no URI SAN.
    #[error("the certificate has no URI subject alternative name (spiffe://...)")]
    NoUri,
    /// The certificate has several identity URIs (ambiguous: refused).
    #[error("the certificate has {0} spiffe:// URIs; exactly one is allowed")]
    Ambiguous(usize),
    /// The certificate is not valid DER X.509.
    #[error("the certificate does not parse: {0}")]
    BadCertificate(String),
    /// The URI is not `spiffe://<trust-domain>/...`.
    #[error("{uri:?} is not in trust domain {trust_domain:?}")]
    WrongTrustDomain {
        /// The URI.
        uri: String,
        /// The expected trust domain.
        trust_domain: String,
    },
    /// The path is none of the known shapes.
    #[error("{0:?} is not control-plane, executor/<id> or role/<role>/<name>")]
    UnknownPath(String),
    /// The role is not viewer, operator or admin.
    #[error("unknown role {0:?} (viewer, operator or admin)")]
    UnknownRole(String),
}

impl Identity {
    /// The URI SAN for this identity in `trust_domain`.
    pub fn to_uri(&self, trust_domain: &str) -> String {
        match self {
            Identity::ControlPlane => format!("{SCHEME}{trust_domain}/control-plane"),
            Identity::Executor(id) => format!("{SCHEME}{trust_domain}/executor/{id}"),
            Identity::Admin { role, name } => {
                format!("{SCHEME}{trust_domain}/role/{}/{name}", role.as_str())
            }
        }
    }

    /// Parses an identity URI of `trust_domain`.
    ///
    /// # Errors
    /// [`IdentityError::WrongTrustDomain`], [`IdentityError::UnknownPath`],
    /// [`IdentityError::UnknownRole`].
    pub fn parse_uri(uri: &str, trust_domain: &str) -> Result<Self, IdentityError> {
        let wrong = || IdentityError::WrongTrustDomain {
            uri: uri.to_owned(),
            trust_domain: trust_domain.to_owned(),
        };
        let path = uri
            .strip_prefix(SCHEME)
            .and_then(|rest| rest.strip_prefix(trust_domain))
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(wrong)?;
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            ["control-plane"] => Ok(Identity::ControlPlane),
            ["executor", id] if valid_segment(id) => Ok(Identity::Executor((*id).to_owned())),
            ["role", role, name] if valid_segment(name) => Ok(Identity::Admin {
                role: AdminRole::parse(role)?,
                name: (*name).to_owned(),
            }),
            _ => Err(IdentityError::UnknownPath(path.to_owned())),
        }
    }

    /// The identity of a DER certificate: its one `spiffe://` URI SAN, parsed.
    ///
    /// # Errors
    /// [`IdentityError`]: no or several spiffe URIs, or one that does not parse.
    pub fn from_cert_der(der: &[u8], trust_domain: &str) -> Result<Self, IdentityError> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| IdentityError::BadCertificate(e.to_string()))?;
        let san = cert
            .subject_alternative_name()
            .map_err(|e| IdentityError::BadCertificate(e.to_string()))?;
        let uris: Vec<&str> = san
            .map(|ext| {
                ext.value
                    .general_names
                    .iter()
                    .filter_map(|n| match n {
                        x509_parser::extensions::GeneralName::URI(u) => Some(*u),
                        _ => None,
                    })
                    .filter(|u| u.starts_with(SCHEME))
                    .collect()
            })
            .unwrap_or_default();
        match uris.as_slice() {
            [] => Err(IdentityError::NoUri),
            [uri] => Self::parse_uri(uri, trust_domain),
            many => Err(IdentityError::Ambiguous(many.len())),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_uri(DEFAULT_TRUST_DOMAIN))
    }
}

/// A path segment: non-empty, no `/`, no whitespace or control characters.
fn valid_segment(s: &str) -> bool {
    !s.is_empty()
        && !s
            .chars()
            .any(|c| c == '/' || c.is_whitespace() || c.is_control())
}

/// Header a control-plane replica sets when it forwards a call to the leader: the
/// identity URI of the original caller's certificate. The leader believes it only from a
/// caller whose own certificate is the control plane's.
pub const FORWARDED_IDENTITY_HEADER: &str = "x-wharf-forwarded-identity";

/// gRPC metadata of a StopTask or StopConnector with `connector_deleted = true`: the
/// deletion token the executor made for its current registration
/// (`RegisterExecutorRequest.deletion_token`). The executor refuses a destructive stop
/// without it, so that a process that is not the control plane it registered with cannot
/// make a plugin drop its resources (docs/security.md).
pub const DELETION_TOKEN_HEADER: &str = "wharf-deletion-token";

/// True when `given` equals `expected`, compared in time that depends only on the
/// lengths (a token guessed byte by byte learns nothing from the answer's delay). An
/// empty `expected` matches nothing.
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    if a.is_empty() || a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Who called, as the TLS layer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The server speaks plaintext (loopback only, or `--insecure`): nobody is known and
    /// the server does not check (see `docs/security.md`).
    Plaintext,
    /// A TLS connection without a client certificate.
    Anonymous,
    /// A client certificate from the cluster CA that names no valid identity.
    Invalid(IdentityError),
    /// A client certificate from the cluster CA with this identity.
    Known(Identity),
}

/// Why a peer may not make a call. Mapped to a status in one place (`From` below).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerAuthError {
    /// No client certificate (UNAUTHENTICATED).
    #[error("a client certificate is required: {0}")]
    NoCertificate(&'static str),
    /// A certificate whose identity does not parse (PERMISSION_DENIED).
    #[error("the client certificate names no Wharf identity: {0}")]
    BadIdentity(IdentityError),
    /// A valid identity that may not make this call (PERMISSION_DENIED).
    #[error("{caller} may not {what}")]
    Denied {
        /// The caller's identity URI.
        caller: String,
        /// What it tried.
        what: String,
    },
}

impl From<PeerAuthError> for tonic::Status {
    fn from(e: PeerAuthError) -> Self {
        let msg = e.to_string();
        match e {
            PeerAuthError::NoCertificate(_) => tonic::Status::unauthenticated(msg),
            PeerAuthError::BadIdentity(_) | PeerAuthError::Denied { .. } => {
                tonic::Status::permission_denied(msg)
            }
        }
    }
}

/// The `Executor` service's rule: only the control plane calls it.
///
/// # Errors
/// [`PeerAuthError`] for anyone else.
pub fn authorize_control_plane(caller: &Caller) -> Result<(), PeerAuthError> {
    match caller {
        Caller::Plaintext | Caller::Known(Identity::ControlPlane) => Ok(()),
        Caller::Anonymous => Err(PeerAuthError::NoCertificate(
            "only the control plane (spiffe://wharf/control-plane) calls an executor",
        )),
        Caller::Invalid(e) => Err(PeerAuthError::BadIdentity(e.clone())),
        Caller::Known(other @ (Identity::Executor(_) | Identity::Admin { .. })) => {
            Err(PeerAuthError::Denied {
                caller: other.to_string(),
                what: "call an executor (only the control plane does)".into(),
            })
        }
    }
}

/// The registry's rule: a call naming executor `claimed` comes from that executor's
/// certificate, or from a control-plane replica forwarding such a call (`forwarded`:
/// the [`FORWARDED_IDENTITY_HEADER`] value).
///
/// # Errors
/// [`PeerAuthError`]: no certificate, another executor's, an admin's, or a forward
/// without (or with a non-matching) original identity.
pub fn authorize_executor(
    caller: &Caller,
    forwarded: Option<&str>,
    claimed: &str,
) -> Result<(), PeerAuthError> {
    let denied = |who: &Identity| PeerAuthError::Denied {
        caller: who.to_string(),
        what: format!("act as executor {claimed:?}"),
    };
    match caller {
        Caller::Plaintext => Ok(()),
        Caller::Anonymous => Err(PeerAuthError::NoCertificate(
            "an executor presents its certificate (spiffe://wharf/executor/<id>)",
        )),
        Caller::Invalid(e) => Err(PeerAuthError::BadIdentity(e.clone())),
        Caller::Known(Identity::Executor(id)) if id == claimed => Ok(()),
        Caller::Known(who @ (Identity::Executor(_) | Identity::Admin { .. })) => Err(denied(who)),
        Caller::Known(Identity::ControlPlane) => {
            let original = forwarded
                .map(|uri| Identity::parse_uri(uri, DEFAULT_TRUST_DOMAIN))
                .transpose()
                .map_err(PeerAuthError::BadIdentity)?;
            match original {
                Some(Identity::Executor(id)) if id == claimed => Ok(()),
                Some(who) => Err(denied(&who)),
                None => Err(denied(&Identity::ControlPlane)),
            }
        }
    }
}

#[cfg(test)]
mod peer_auth_tests {
    use super::*;

    fn exec(id: &str) -> Caller {
        Caller::Known(Identity::Executor(id.into()))
    }

    #[test]
    fn only_the_control_plane_calls_an_executor() {
        assert_eq!(authorize_control_plane(&Caller::Plaintext), Ok(()));
        assert_eq!(
            authorize_control_plane(&Caller::Known(Identity::ControlPlane)),
            Ok(())
        );
        let code = |c: &Caller| {
            tonic::Status::from(authorize_control_plane(c).expect_err("refused")).code()
        };
        assert_eq!(code(&Caller::Anonymous), tonic::Code::Unauthenticated);
        assert_eq!(
            code(&Caller::Invalid(IdentityError::NoUri)),
            tonic::Code::PermissionDenied
        );
        assert_eq!(code(&exec("a")), tonic::Code::PermissionDenied);
        assert_eq!(
            code(&Caller::Known(Identity::Admin {
                role: AdminRole::Admin,
                name: "root".into()
            })),
            tonic::Code::PermissionDenied
        );
    }

    #[test]
    fn an_executor_acts_only_as_itself() {
        assert_eq!(authorize_executor(&Caller::Plaintext, None, "a"), Ok(()));
        assert_eq!(authorize_executor(&exec("a"), None, "a"), Ok(()));
        // A forged forward header from an executor is ignored: its certificate decides.
        assert!(authorize_executor(&exec("b"), Some("spiffe://wharf/executor/a"), "a").is_err());
        let err = authorize_executor(&exec("b"), None, "a").expect_err("impersonation");
        assert_eq!(
            tonic::Status::from(err).code(),
            tonic::Code::PermissionDenied
        );
        let err = authorize_executor(&Caller::Anonymous, None, "a").expect_err("anonymous");
        assert_eq!(
            tonic::Status::from(err).code(),
            tonic::Code::Unauthenticated
        );
        assert!(authorize_executor(&Caller::Invalid(IdentityError::NoUri), None, "a").is_err());
        let admin = Caller::Known(Identity::Admin {
            role: AdminRole::Admin,
            name: "root".into(),
        });
        assert!(authorize_executor(&admin, None, "a").is_err());
    }

    #[test]
    fn a_forward_carries_the_original_executor() {
        let cp = Caller::Known(Identity::ControlPlane);
        assert_eq!(
            authorize_executor(&cp, Some("spiffe://wharf/executor/a"), "a"),
            Ok(())
        );
        assert!(authorize_executor(&cp, Some("spiffe://wharf/executor/b"), "a").is_err());
        assert!(authorize_executor(&cp, None, "a").is_err());
        assert!(authorize_executor(&cp, Some("garbage"), "a").is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_identity_round_trips_through_its_uri() {
        for id in [
            Identity::ControlPlane,
            Identity::Executor("exec-a".into()),
            Identity::Admin {
                role: AdminRole::Viewer,
                name: "ann".into(),
            },
            Identity::Admin {
                role: AdminRole::Operator,
                name: "bob".into(),
            },
            Identity::Admin {
                role: AdminRole::Admin,
                name: "root".into(),
            },
        ] {
            let uri = id.to_uri("wharf");
            assert_eq!(Identity::parse_uri(&uri, "wharf"), Ok(id));
        }
    }

    #[test]
    fn another_trust_domain_is_refused() {
        assert!(matches!(
            Identity::parse_uri("spiffe://other/control-plane", "wharf"),
            Err(IdentityError::WrongTrustDomain { .. })
        ));
        assert!(matches!(
            Identity::parse_uri("spiffe://wharfx/control-plane", "wharf"),
            Err(IdentityError::WrongTrustDomain { .. })
        ));
        assert!(matches!(
            Identity::parse_uri("https://wharf/control-plane", "wharf"),
            Err(IdentityError::WrongTrustDomain { .. })
        ));
    }

    #[test]
    fn unknown_shapes_are_refused() {
        for path in [
            "executor",
            "executor/",
            "executor/a/b",
            "role/admin",
            "control-plane/x",
        ] {
            assert!(
                matches!(
                    Identity::parse_uri(&format!("spiffe://wharf/{path}"), "wharf"),
                    Err(IdentityError::UnknownPath(_))
                ),
                "{path}"
            );
        }
        assert_eq!(
            Identity::parse_uri("spiffe://wharf/role/root/x", "wharf"),
            Err(IdentityError::UnknownRole("root".into()))
        );
    }

    #[test]
    fn a_deletion_token_matches_only_itself_and_never_when_empty() {
        assert!(token_matches("abc123", "abc123"));
        assert!(!token_matches("abc123", "abc124"));
        assert!(!token_matches("abc123", "abc12"));
        assert!(!token_matches("abc123", ""));
        assert!(!token_matches("", ""));
    }
}
