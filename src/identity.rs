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
}
