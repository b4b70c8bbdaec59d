//! Recording admin calls: every mutating call, accepted or refused, becomes one
//! [`AuditEntry`] in the store (durable, both backends) and one structured log event with
//! target `wharf::audit`. Read back with ListAuditEntries. Retention: see
//! [`AuditRetention`] and docs/security.md ("Audit trail").

use tracing::{error, info};

use crate::model::{AuditEntry, AuditRetention};
use crate::store::StateStore;

/// Log target of the audit events (`RUST_LOG=wharf::audit=info` shows only them).
pub const AUDIT_TARGET: &str = "wharf::audit";

/// The entry's `principal` when the caller did not authenticate.
pub const UNAUTHENTICATED_PRINCIPAL: &str = "-";

/// Who an audit entry names, as (principal, role, auth method): the authenticated
/// principal; for a refused caller that presented a verified client certificate without
/// an admin role (an executor's, say), that certificate's identity with method
/// `certificate` and no role; [`UNAUTHENTICATED_PRINCIPAL`] and method `none` for a caller
/// without credentials.
pub fn who(
    principal: Option<&super::Principal>,
    peer: Option<&super::authn::PeerIdentity>,
) -> (String, String, String) {
    use super::authn::PeerIdentity;
    match (principal, peer) {
        (Some(p), _) => (
            p.name.clone(),
            p.role.as_str().to_owned(),
            p.method.as_str().to_owned(),
        ),
        (None, Some(PeerIdentity::Other(id))) => (id.clone(), String::new(), "certificate".into()),
        (None, Some(PeerIdentity::ControlPlane)) => (
            wharf::identity::Identity::ControlPlane.to_string(),
            String::new(),
            "certificate".into(),
        ),
        (None, Some(PeerIdentity::AdminClient { role, name })) => {
            // Refused before its certificate counted (an invalid bearer token was sent
            // alongside): the certificate still says who it is.
            (
                format!("{role}/{name}"),
                String::new(),
                "certificate".into(),
            )
        }
        (None, None) => (
            UNAUTHENTICATED_PRINCIPAL.to_owned(),
            String::new(),
            "none".into(),
        ),
    }
}

/// Writes `entry` to `store` (pruning per `retention`) and logs it. A store failure is
/// logged at ERROR and does not change the call's answer: the call has already happened
/// (or been refused) by the time it is recorded; the log event is still emitted.
pub fn record(store: &dyn StateStore, retention: &AuditRetention, entry: &AuditEntry) {
    info!(
        target: AUDIT_TARGET,
        id = %entry.id,
        time_ms = entry.time_ms,
        principal = %entry.principal,
        role = %entry.role,
        auth_method = %entry.auth_method,
        rpc = %entry.rpc,
        connector = %entry.connector,
        deletion_mode = %entry.deletion_mode,
        outcome = %entry.outcome,
        // Not `message`: that is the event's own ("admin call"), and JSON logs would
        // carry the key twice.
        status_message = %entry.message,
        forwarded_by = %entry.forwarded_by,
        "admin call"
    );
    if let Err(e) = store.append_audit(entry, retention, entry.time_ms) {
        error!(target: AUDIT_TARGET, id = %entry.id, error = %e, "audit entry not stored; the log event above is its only record");
    }
}

/// The name gRPC gives `code` (`OK`, `PERMISSION_DENIED`, ...), for the entry's outcome.
pub fn code_name(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::Ok => "OK",
        tonic::Code::Cancelled => "CANCELLED",
        tonic::Code::Unknown => "UNKNOWN",
        tonic::Code::InvalidArgument => "INVALID_ARGUMENT",
        tonic::Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        tonic::Code::NotFound => "NOT_FOUND",
        tonic::Code::AlreadyExists => "ALREADY_EXISTS",
        tonic::Code::PermissionDenied => "PERMISSION_DENIED",
        tonic::Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        tonic::Code::FailedPrecondition => "FAILED_PRECONDITION",
        tonic::Code::Aborted => "ABORTED",
        tonic::Code::OutOfRange => "OUT_OF_RANGE",
        tonic::Code::Unimplemented => "UNIMPLEMENTED",
        tonic::Code::Internal => "INTERNAL",
        tonic::Code::Unavailable => "UNAVAILABLE",
        tonic::Code::DataLoss => "DATA_LOSS",
        tonic::Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod who_tests {
    use super::super::authn::{AuthMethod, PeerIdentity};
    use super::super::{Principal, Role};
    use super::*;

    #[test]
    fn an_authenticated_principal_is_named_with_its_role_and_method() {
        let p = Principal {
            name: "alice".into(),
            role: Role::Operator,
            method: AuthMethod::Token,
        };
        assert_eq!(
            who(Some(&p), None),
            ("alice".into(), "operator".into(), "token".into())
        );
    }

    #[test]
    fn a_refused_executor_certificate_is_named_by_its_identity() {
        let peer = PeerIdentity::Other("spiffe://wharf/executor/exec-1".into());
        assert_eq!(
            who(None, Some(&peer)),
            (
                "spiffe://wharf/executor/exec-1".into(),
                String::new(),
                "certificate".into()
            )
        );
    }

    #[test]
    fn a_refused_control_plane_certificate_is_named_by_its_identity() {
        let (name, _, method) = who(None, Some(&PeerIdentity::ControlPlane));
        assert_eq!(
            (name.as_str(), method.as_str()),
            ("spiffe://wharf/control-plane", "certificate")
        );
    }

    #[test]
    fn a_refused_admin_certificate_is_named_by_role_and_name() {
        let peer = PeerIdentity::AdminClient {
            role: Role::Viewer,
            name: "bob".into(),
        };
        assert_eq!(who(None, Some(&peer)).0, "viewer/bob");
    }

    #[test]
    fn a_caller_without_credentials_is_a_dash() {
        assert_eq!(who(None, None), ("-".into(), String::new(), "none".into()));
    }
}
