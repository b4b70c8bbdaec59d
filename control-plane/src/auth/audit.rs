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
        message = %entry.message,
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
