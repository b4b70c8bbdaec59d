//! Authentication: from the request's headers and the peer's certificate identity to a
//! [`Principal`], or a refusal. See docs/security.md ("Admin authentication").

use std::fmt;
use std::sync::Arc;

use wharf::identity::{AdminRole, DEFAULT_TRUST_DOMAIN, Identity};
use wharf::tls::PeerInfo;

use super::Role;
use super::token::TokenSet;

/// Header in which a follower tells the leader which certificate principal it forwards a
/// call for (`<role>/<name>`). Trusted only from a peer whose certificate is the control
/// plane's; a follower always replaces what a client sent in it.
pub const FORWARDED_PRINCIPAL_HEADER: &str = "x-wharf-forwarded-principal";
/// Header a follower marks a forwarded request with (`grpc::leader_route`'s, the same for
/// REST): from a control-plane certificate without a forwarded principal it means the
/// original caller sent no credentials.
const FORWARDED_BY_HEADER: &str = "x-wharf-forwarded-by";

/// Name of the principal of an unauthenticated control plane (dev mode).
pub const ANONYMOUS: &str = "anonymous";

/// Who the peer's verified client certificate says it is, as the admin API sees it (from
/// its SPIFFE-style URI SAN, parsed by `wharf::identity`; see docs/security.md). Made by
/// [`peer_identity`] and handed to [`authenticate`]; `None` there means no verified client
/// certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerIdentity {
    /// `spiffe://<trust-domain>/role/<role>/<name>`: an admin client.
    AdminClient {
        /// Its role.
        role: Role,
        /// Its name.
        name: String,
    },
    /// `spiffe://<trust-domain>/control-plane`: another replica of the control plane.
    ControlPlane,
    /// Any other identity (an executor's, another trust domain's): no admin role.
    Other(String),
}

impl PeerIdentity {
    /// Classifies the URI SAN `uri` of a certificate verified against this cluster's CA,
    /// in `trust_domain` (default `wharf`), as `wharf::identity` parses it.
    pub fn from_uri(uri: &str, trust_domain: &str) -> Self {
        match Identity::parse_uri(uri, trust_domain) {
            Ok(id) => Self::from(&id),
            Err(_) => PeerIdentity::Other(uri.to_owned()),
        }
    }
}

impl From<&Identity> for PeerIdentity {
    fn from(id: &Identity) -> Self {
        match id {
            Identity::ControlPlane => PeerIdentity::ControlPlane,
            Identity::Executor(_) => PeerIdentity::Other(id.to_uri(DEFAULT_TRUST_DOMAIN)),
            Identity::Admin { role, name } => PeerIdentity::AdminClient {
                role: match role {
                    AdminRole::Viewer => Role::Viewer,
                    AdminRole::Operator => Role::Operator,
                    AdminRole::Admin => Role::Admin,
                },
                name: name.clone(),
            },
        }
    }
}

/// The identity in the verified client certificate of a request's connection, from what
/// the TLS layer ([`wharf::tls::PeerInfo`], in the request's extensions) knows; `None`
/// for plaintext or without a client certificate. A certificate from the cluster CA that
/// names no valid identity is [`PeerIdentity::Other`] (no admin role).
pub fn peer_identity(info: Option<&PeerInfo>) -> Option<PeerIdentity> {
    let info = info.filter(|i| i.tls)?;
    match info.identity() {
        Ok(None) => None,
        Ok(Some(id)) => Some(PeerIdentity::from(&id)),
        Err(e) => Some(PeerIdentity::Other(e.to_string())),
    }
}

/// How a principal proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// Nothing: no authentication is configured (dev mode on loopback).
    Anonymous,
    /// A bearer token from the token file.
    Token,
    /// A client certificate.
    Certificate,
    /// A client certificate verified by the follower that forwarded the call (the
    /// follower itself authenticated with the control-plane certificate).
    ForwardedCertificate,
}

impl AuthMethod {
    /// Name in the audit trail: `anonymous`, `token`, `certificate`, `forwarded-certificate`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Anonymous => "anonymous",
            AuthMethod::Token => "token",
            AuthMethod::Certificate => "certificate",
            AuthMethod::ForwardedCertificate => "forwarded-certificate",
        }
    }
}

/// An authenticated admin caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name or the certificate's `<name>`; `anonymous` in dev mode.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// How it authenticated.
    pub method: AuthMethod,
}

impl Principal {
    /// The caller of a control plane without authentication (dev mode): an admin.
    pub fn anonymous() -> Self {
        Self {
            name: ANONYMOUS.to_owned(),
            role: Role::Admin,
            method: AuthMethod::Anonymous,
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, {})", self.name, self.role, self.method.as_str())
    }
}

/// What this control plane accepts as proof of identity: a snapshot taken per call (the
/// token file may change between calls).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The token file's tokens; `None` when no `--admin-tokens` file is configured.
    pub tokens: Option<Arc<TokenSet>>,
    /// Whether client certificates are verified against a CA (set by the TLS layer).
    pub client_certs: bool,
}

impl Credentials {
    /// No authentication configured at all: every caller is [`Principal::anonymous`].
    /// Only allowed on a loopback listen address, or with `--insecure`.
    pub fn is_open(&self) -> bool {
        self.tokens.is_none() && !self.client_certs
    }
}

/// Why a caller is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No valid credentials (UNAUTHENTICATED).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// Authenticated, but the identity carries no admin role (PERMISSION_DENIED).
    #[error("permission denied: {0}")]
    NoAdminRole(String),
    /// The principal's role may not make the call (PERMISSION_DENIED).
    #[error("permission denied: {principal} may not call {rpc}{detail}; it needs role {needed}")]
    Forbidden {
        /// Who asked (`name (role, method)`).
        principal: String,
        /// The RPC.
        rpc: &'static str,
        /// The deletion mode, as `" with mode force"`, or empty.
        detail: String,
        /// The least role that may.
        needed: Role,
    },
}

/// The `<role>/<name>` a follower sends in [`FORWARDED_PRINCIPAL_HEADER`] for a
/// certificate principal; `None` for other principals (a token travels as the
/// `authorization` header itself, and the leader checks it again).
pub fn forwarded_principal_value(peer: Option<&PeerIdentity>) -> Option<String> {
    match peer {
        Some(PeerIdentity::AdminClient { role, name }) => Some(format!("{role}/{name}")),
        Some(PeerIdentity::ControlPlane | PeerIdentity::Other(_)) | None => None,
    }
}

fn parse_forwarded(value: &str) -> Option<(Role, String)> {
    let (role, name) = value.split_once('/')?;
    // A certificate name as `wharf::identity` accepts it (no '/', no space), in a header.
    if name.is_empty() || name.contains('/') || !name.chars().all(|c| c.is_ascii_graphic()) {
        return None;
    }
    Some((role.parse().ok()?, name.to_owned()))
}

/// Who is calling, from the request's `headers` and the verified certificate identity of
/// the peer (`None`: plaintext, or no client certificate).
///
/// Order: without any authentication configured, everyone is [`Principal::anonymous`]. A
/// present `authorization` header decides alone (`Bearer <token>`, looked up by hash in
/// the token file). Otherwise the certificate: an admin-client identity is that
/// principal; the control plane's own identity stands for the certificate principal named
/// in [`FORWARDED_PRINCIPAL_HEADER`] (a forwarded call). The forwarded header from any
/// other peer is ignored.
///
/// # Errors
/// [`AuthError::Unauthenticated`] without (valid) credentials, [`AuthError::NoAdminRole`]
/// for a certificate that names no admin role.
pub fn authenticate(
    headers: &http::HeaderMap,
    peer: Option<&PeerIdentity>,
    creds: &Credentials,
) -> Result<Principal, AuthError> {
    if creds.is_open() {
        return Ok(Principal::anonymous());
    }
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let Some(tokens) = &creds.tokens else {
            return Err(AuthError::Unauthenticated(
                "bearer tokens are not enabled on this control plane (no --admin-tokens file)"
                    .into(),
            ));
        };
        let text = value.to_str().unwrap_or_default();
        let token = match text.split_once(' ') {
            Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim(),
            _ => {
                return Err(AuthError::Unauthenticated(
                    "the authorization header must be `Bearer <token>`".into(),
                ));
            }
        };
        return match tokens.lookup(token) {
            Some(e) => Ok(Principal {
                name: e.name.clone(),
                role: e.role,
                method: AuthMethod::Token,
            }),
            None => Err(AuthError::Unauthenticated(
                "unknown or revoked bearer token".into(),
            )),
        };
    }
    match peer {
        Some(PeerIdentity::AdminClient { role, name }) => Ok(Principal {
            name: name.clone(),
            role: *role,
            method: AuthMethod::Certificate,
        }),
        Some(PeerIdentity::ControlPlane) => {
            let forwarded = headers
                .get(FORWARDED_PRINCIPAL_HEADER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_forwarded);
            match forwarded {
                Some((role, name)) => Ok(Principal {
                    name,
                    role,
                    method: AuthMethod::ForwardedCertificate,
                }),
                // A follower forwarding a caller that sent no credentials: what a direct
                // call without them gets.
                None if headers.contains_key(FORWARDED_BY_HEADER) => {
                    Err(AuthError::Unauthenticated(
                        "no credentials: send `authorization: Bearer <token>` or a client certificate".into(),
                    ))
                }
                None => Err(AuthError::NoAdminRole(
                    "the control-plane certificate carries no admin role of its own".into(),
                )),
            }
        }
        Some(PeerIdentity::Other(id)) => Err(AuthError::NoAdminRole(format!(
            "certificate identity {id:?} is not an admin client (spiffe://<trust-domain>/role/<role>/<name>)"
        ))),
        None => Err(AuthError::Unauthenticated(
            "no credentials: send `authorization: Bearer <token>` or a client certificate".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::token::{file_line, mint_token, parse};

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn creds(token: &str, role: Role) -> Credentials {
        Credentials {
            tokens: Some(Arc::new(parse(&file_line("alice", role, token)).unwrap())),
            client_certs: false,
        }
    }

    #[test]
    fn without_any_auth_configured_everyone_is_the_anonymous_admin() {
        let p = authenticate(&headers(&[]), None, &Credentials::default()).unwrap();
        assert_eq!(p, Principal::anonymous());
        assert_eq!(p.role, Role::Admin);
    }

    #[test]
    fn a_known_bearer_token_is_its_principal() {
        let t = mint_token();
        let p = authenticate(
            &headers(&[("authorization", &format!("Bearer {t}"))]),
            None,
            &creds(&t, Role::Operator),
        )
        .unwrap();
        assert_eq!(
            (p.name.as_str(), p.role, p.method),
            ("alice", Role::Operator, AuthMethod::Token)
        );
        // The scheme is case-insensitive (RFC 6750 / 9110).
        assert!(
            authenticate(
                &headers(&[("authorization", &format!("bearer {t}"))]),
                None,
                &creds(&t, Role::Operator)
            )
            .is_ok()
        );
    }

    #[test]
    fn no_credentials_an_unknown_token_or_a_malformed_header_are_unauthenticated() {
        let c = creds(&mint_token(), Role::Admin);
        for h in [
            headers(&[]),
            headers(&[("authorization", &format!("Bearer {}", mint_token()))]),
            headers(&[("authorization", "Basic YWxpY2U6cHc=")]),
            headers(&[("authorization", "Bearer")]),
        ] {
            assert!(
                matches!(
                    authenticate(&h, None, &c),
                    Err(AuthError::Unauthenticated(_))
                ),
                "{h:?}"
            );
        }
    }

    #[test]
    fn a_bad_token_is_not_rescued_by_a_certificate() {
        let c = Credentials {
            tokens: Some(Arc::new(TokenSet::default())),
            client_certs: true,
        };
        let peer = PeerIdentity::AdminClient {
            role: Role::Admin,
            name: "bob".into(),
        };
        assert!(matches!(
            authenticate(
                &headers(&[("authorization", "Bearer nope")]),
                Some(&peer),
                &c
            ),
            Err(AuthError::Unauthenticated(_))
        ));
    }

    #[test]
    fn a_certificate_principal_is_taken_from_the_identity_and_forwarded_only_by_a_control_plane() {
        let c = Credentials {
            tokens: None,
            client_certs: true,
        };
        let admin = PeerIdentity::from_uri("spiffe://wharf/role/admin/bob", "wharf");
        let p = authenticate(&headers(&[]), Some(&admin), &c).unwrap();
        assert_eq!(
            (p.name.as_str(), p.role, p.method),
            ("bob", Role::Admin, AuthMethod::Certificate)
        );

        let fwd = headers(&[(FORWARDED_PRINCIPAL_HEADER, "operator/carol")]);
        let cp = PeerIdentity::from_uri("spiffe://wharf/control-plane", "wharf");
        assert_eq!(cp, PeerIdentity::ControlPlane);
        let p = authenticate(&fwd, Some(&cp), &c).unwrap();
        assert_eq!(
            (p.name.as_str(), p.role, p.method),
            ("carol", Role::Operator, AuthMethod::ForwardedCertificate)
        );
        // The same header from an admin client or an executor is not believed.
        let viewer = PeerIdentity::from_uri("spiffe://wharf/role/viewer/eve", "wharf");
        assert_eq!(
            authenticate(&fwd, Some(&viewer), &c).unwrap().role,
            Role::Viewer
        );
        // Forwarded by a follower for a caller without credentials: as a direct call.
        assert_eq!(
            FORWARDED_BY_HEADER,
            crate::grpc::leader_route::FORWARDED_HEADER
        );
        let bare = headers(&[(FORWARDED_BY_HEADER, "https://10.0.0.2:7000")]);
        assert!(matches!(
            authenticate(&bare, Some(&cp), &c),
            Err(AuthError::Unauthenticated(_))
        ));
        assert!(matches!(
            authenticate(&headers(&[]), Some(&cp), &c),
            Err(AuthError::NoAdminRole(_))
        ));
        let exec = PeerIdentity::from_uri("spiffe://wharf/executor/exec-1", "wharf");
        assert!(matches!(
            authenticate(&fwd, Some(&exec), &c),
            Err(AuthError::NoAdminRole(_))
        ));
        assert!(matches!(
            authenticate(&fwd, None, &c),
            Err(AuthError::Unauthenticated(_))
        ));
        // A control plane forwarding nothing has no role of its own.
        assert!(matches!(
            authenticate(&headers(&[]), Some(&cp), &c),
            Err(AuthError::NoAdminRole(_))
        ));
    }

    #[test]
    fn identities_of_another_trust_domain_or_shape_are_other() {
        for uri in [
            "spiffe://evil/role/admin/bob",
            "spiffe://wharf/role/root/bob",
            "spiffe://wharf/role/admin/",
            "spiffe://wharf/role/admin/a/b",
            "spiffe://wharfx/control-plane",
            "https://wharf/control-plane",
        ] {
            assert!(
                matches!(PeerIdentity::from_uri(uri, "wharf"), PeerIdentity::Other(_)),
                "{uri}"
            );
        }
    }

    #[test]
    fn only_certificate_principals_are_forwarded_in_the_header() {
        let admin = PeerIdentity::AdminClient {
            role: Role::Admin,
            name: "bob".into(),
        };
        assert_eq!(
            forwarded_principal_value(Some(&admin)).as_deref(),
            Some("admin/bob")
        );
        assert_eq!(
            forwarded_principal_value(Some(&PeerIdentity::ControlPlane)),
            None
        );
        assert_eq!(forwarded_principal_value(None), None);
    }
}
