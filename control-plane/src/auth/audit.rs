//! Recording admin calls: every mutating call of an identified caller, accepted or
//! refused, becomes one [`AuditEntry`] in the store (durable, both backends) and one
//! structured log event with target `wharf::audit`. Read back with ListAuditEntries.
//! Retention: see [`AuditRetention`] and docs/security.md ("Audit trail").
//!
//! A caller that presented no valid credentials is not written anywhere durable
//! ([`in_trail`]): a stranger must not be able to grow the store or evict the trail by
//! retention. Such refusals are counted and logged at most once per
//! [`UNAUTHENTICATED_LOG_INTERVAL`] ([`wharf::throttle::Throttle`]). Every caller-supplied
//! text in an entry or a log line is bounded ([`bounded`]).

use std::borrow::Cow;
use std::time::{Duration, Instant};

use tracing::{error, info};

pub use crate::model::text::bounded;
use crate::model::{AuditEntry, AuditRetention};
use crate::store::StateStore;

/// Log target of the audit events (`RUST_LOG=wharf::audit=info` shows only them).
pub const AUDIT_TARGET: &str = "wharf::audit";

/// The entry's `principal` when the caller did not authenticate (the guard records no
/// such call: [`in_trail`]; kept for a direct [`super::AdminAuth::record`]).
pub const UNAUTHENTICATED_PRINCIPAL: &str = "-";

/// Longest caller-supplied name quoted whole in an audit entry, a log line or an error
/// message, in bytes: the longest valid connector name (valid names are ASCII, so its
/// characters are bytes). A longer name is invalid anyway; it is cut ([`bounded_name`]).
pub const MAX_QUOTED_NAME_BYTES: usize = wharf::ids::MAX_CONNECTOR_NAME_LEN;

/// Longest status message kept in an audit entry, in bytes (a message quotes names
/// already bounded by [`MAX_QUOTED_NAME_BYTES`]; this is the backstop for the rest).
pub const MAX_AUDIT_MESSAGE_BYTES: usize = 1024;

/// How often at most a refusal of an unauthenticated caller is logged: the first one is,
/// then one line per interval says how many more were refused since. A flood of such
/// calls costs a counter increment each, not a log line each.
pub const UNAUTHENTICATED_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// A caller-supplied connector name as it may be quoted: [`bounded`] to
/// [`MAX_QUOTED_NAME_BYTES`].
pub fn bounded_name(name: &str) -> Cow<'_, str> {
    bounded(name, MAX_QUOTED_NAME_BYTES)
}

/// Whether a call's outcome goes into the durable trail: yes when the caller is
/// identified, by an authenticated `principal` or (refused) by the verified client
/// certificate `peer` of an admin client or of anything else our CA signed (an
/// executor's); no for a caller with no valid credentials (none, an unknown or revoked
/// token, a malformed `authorization` header), who is only counted and logged at a
/// bounded rate. A refused call with the control plane's own certificate is a follower
/// forwarding such a caller's call, so it is not identified either.
pub fn in_trail(
    principal: Option<&super::Principal>,
    peer: Option<&super::authn::PeerIdentity>,
) -> bool {
    use super::authn::PeerIdentity;
    match (principal, peer) {
        (Some(_), _) => true,
        (None, Some(PeerIdentity::AdminClient { .. } | PeerIdentity::Other(_))) => true,
        (None, Some(PeerIdentity::ControlPlane) | None) => false,
    }
}

/// Refused calls of one identified caller written to the trail per minute; the rest of
/// that minute's refusals are counted (`wharf_admin_refusals_not_recorded_total`) and the
/// next entry of that caller says how many were left out. A refusal costs the caller
/// nothing, and every entry pushes the oldest out at `--audit-max-entries`: without a
/// budget a viewer's token could empty the trail of everyone else's entries.
pub const REFUSALS_RECORDED_PER_MINUTE: u32 = 60;

/// The length of a refusal budget's window ([`REFUSALS_RECORDED_PER_MINUTE`]).
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(60);

/// One caller's refusals in the current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusalWindow {
    /// When the window began.
    pub started: Instant,
    /// Refusals written to the trail in it.
    pub recorded: u32,
    /// Refusals left out since the last one written (this window or earlier ones).
    pub left_out: u64,
}

/// What happens to one refusal of a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalFate {
    /// Written to the trail; `left_out_before` refusals of this caller were not, since
    /// its previous entry (said in this entry's message).
    Recorded {
        /// Refusals not written since the caller's previous entry.
        left_out_before: u64,
    },
    /// Over the budget: counted, not written. `first` for the first one of the window
    /// (which is logged).
    LeftOut {
        /// The first refusal of the window left out.
        first: bool,
    },
}

/// Whether an answer with outcome `outcome` (a gRPC code name) is a refusal that changed
/// nothing, and so counts against the caller's budget ([`REFUSALS_RECORDED_PER_MINUTE`]).
/// Any other answer is always recorded: `OK`, and the answers a call that took effect
/// may still get (a `wait` that timed out is DEADLINE_EXCEEDED after the deletion was
/// recorded; UNAVAILABLE, INTERNAL and the like after a write may have happened).
pub fn is_budgeted_refusal(outcome: &str) -> bool {
    matches!(
        outcome,
        "PERMISSION_DENIED"
            | "INVALID_ARGUMENT"
            | "NOT_FOUND"
            | "FAILED_PRECONDITION"
            | "ALREADY_EXISTS"
            | "OUT_OF_RANGE"
            | "RESOURCE_EXHAUSTED"
            | "UNIMPLEMENTED"
            | "UNAUTHENTICATED"
    )
}

/// The fate of an answer at `now` to a caller whose window is `window` (`None`: none
/// yet), and the window after it: a `budgeted` refusal ([`is_budgeted_refusal`]) is
/// recorded while the window has room; any other answer is always recorded. Either
/// recorded entry carries how many refusals were left out before it.
pub fn refusal_fate(
    window: Option<RefusalWindow>,
    now: Instant,
    budgeted: bool,
) -> (RefusalFate, RefusalWindow) {
    let fresh = |recorded, left_out| RefusalWindow {
        started: now,
        recorded,
        left_out,
    };
    let budgeted_count = u32::from(budgeted);
    match window {
        None => (
            RefusalFate::Recorded { left_out_before: 0 },
            fresh(budgeted_count, 0),
        ),
        Some(w) if !budgeted => (
            RefusalFate::Recorded {
                left_out_before: w.left_out,
            },
            RefusalWindow { left_out: 0, ..w },
        ),
        Some(w) if now.saturating_duration_since(w.started) >= REFUSAL_WINDOW => (
            RefusalFate::Recorded {
                left_out_before: w.left_out,
            },
            fresh(1, 0),
        ),
        Some(w) if w.recorded < REFUSALS_RECORDED_PER_MINUTE => (
            RefusalFate::Recorded {
                left_out_before: w.left_out,
            },
            RefusalWindow {
                recorded: w.recorded + 1,
                left_out: 0,
                ..w
            },
        ),
        Some(w) => (
            RefusalFate::LeftOut {
                first: w.left_out == 0,
            },
            RefusalWindow {
                left_out: w.left_out + 1,
                ..w
            },
        ),
    }
}

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
mod bound_tests {
    use super::super::authn::{AuthMethod, PeerIdentity};
    use super::super::{Principal, Role};
    use super::*;

    #[test]
    fn a_name_of_the_longest_valid_length_is_quoted_whole() {
        let name = "x".repeat(MAX_QUOTED_NAME_BYTES);
        assert!(matches!(bounded_name(&name), Cow::Borrowed(n) if n == name));
        assert_eq!(bounded_name("orders"), "orders");
    }

    #[test]
    fn a_longer_name_is_cut_with_a_marker_and_its_length() {
        let name = "z".repeat(1_000_000);
        let cut = bounded_name(&name);
        assert_eq!(
            cut,
            format!(
                "{}...[cut, 1000000 bytes]",
                "z".repeat(MAX_QUOTED_NAME_BYTES)
            )
        );
        assert!(cut.len() < MAX_QUOTED_NAME_BYTES + 40);
    }

    #[test]
    fn a_message_is_bounded_by_its_own_limit() {
        let msg = "m".repeat(MAX_AUDIT_MESSAGE_BYTES + 1);
        assert!(bounded(&msg, MAX_AUDIT_MESSAGE_BYTES).ends_with("...[cut, 1025 bytes]"));
        assert_eq!(bounded("short", MAX_AUDIT_MESSAGE_BYTES), "short");
    }

    #[test]
    fn an_authenticated_caller_is_in_the_trail() {
        let p = Principal {
            name: "alice".into(),
            role: Role::Viewer,
            method: AuthMethod::Token,
        };
        assert!(in_trail(Some(&p), None));
    }

    #[test]
    fn a_refused_caller_with_a_verified_certificate_is_in_the_trail() {
        let peer = PeerIdentity::Other("spiffe://wharf/executor/exec-1".into());
        assert!(in_trail(None, Some(&peer)));
    }

    #[test]
    fn a_refused_admin_certificate_with_a_bad_token_is_in_the_trail() {
        let peer = PeerIdentity::AdminClient {
            role: Role::Admin,
            name: "bob".into(),
        };
        assert!(in_trail(None, Some(&peer)));
    }

    #[test]
    fn a_caller_without_valid_credentials_is_not_in_the_trail() {
        assert!(!in_trail(None, None));
    }

    #[test]
    fn a_call_without_valid_credentials_forwarded_by_a_follower_is_not_in_the_trail() {
        assert!(!in_trail(None, Some(&PeerIdentity::ControlPlane)));
    }

    #[test]
    fn the_first_unauthenticated_refusal_is_logged() {
        assert!(wharf::throttle::line_due(
            None,
            Instant::now(),
            UNAUTHENTICATED_LOG_INTERVAL
        ));
    }

    #[test]
    fn an_unauthenticated_refusal_soon_after_a_logged_one_is_not_logged() {
        let t = Instant::now();
        assert!(!wharf::throttle::line_due(
            Some(t),
            t + UNAUTHENTICATED_LOG_INTERVAL / 2,
            UNAUTHENTICATED_LOG_INTERVAL
        ));
    }

    #[test]
    fn an_unauthenticated_refusal_an_interval_after_a_logged_one_is_logged() {
        let t = Instant::now();
        assert!(wharf::throttle::line_due(
            Some(t),
            t + UNAUTHENTICATED_LOG_INTERVAL,
            UNAUTHENTICATED_LOG_INTERVAL
        ));
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

#[cfg(test)]
mod refusal_budget_tests {
    use super::*;

    fn window(started: Instant, recorded: u32, left_out: u64) -> RefusalWindow {
        RefusalWindow {
            started,
            recorded,
            left_out,
        }
    }

    #[test]
    fn a_callers_first_refusal_is_recorded() {
        let now = Instant::now();
        assert_eq!(
            refusal_fate(None, now, true),
            (
                RefusalFate::Recorded { left_out_before: 0 },
                window(now, 1, 0)
            )
        );
    }

    #[test]
    fn refusals_under_the_budget_are_recorded() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(1);
        let (fate, w) = refusal_fate(Some(window(t0, 59, 0)), now, true);
        assert_eq!(fate, RefusalFate::Recorded { left_out_before: 0 });
        assert_eq!(w, window(t0, 60, 0));
    }

    #[test]
    fn refusals_over_the_budget_are_left_out_and_the_first_one_says_so() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(1);
        let (fate, w) = refusal_fate(Some(window(t0, REFUSALS_RECORDED_PER_MINUTE, 0)), now, true);
        assert_eq!(fate, RefusalFate::LeftOut { first: true });
        let (fate, w) = refusal_fate(Some(w), now, true);
        assert_eq!(fate, RefusalFate::LeftOut { first: false });
        assert_eq!(w, window(t0, REFUSALS_RECORDED_PER_MINUTE, 2));
    }

    #[test]
    fn the_next_window_records_again_and_says_how_many_were_left_out() {
        let t0 = Instant::now();
        let now = t0 + REFUSAL_WINDOW;
        let (fate, w) = refusal_fate(Some(window(t0, REFUSALS_RECORDED_PER_MINUTE, 7)), now, true);
        assert_eq!(fate, RefusalFate::Recorded { left_out_before: 7 });
        assert_eq!(w, window(now, 1, 0));
    }

    #[test]
    fn an_answer_that_is_no_plain_refusal_is_always_recorded_and_carries_the_count() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_secs(1);
        let full = window(t0, REFUSALS_RECORDED_PER_MINUTE, 4);
        let (fate, w) = refusal_fate(Some(full), now, false);
        assert_eq!(fate, RefusalFate::Recorded { left_out_before: 4 });
        assert_eq!(w, window(t0, REFUSALS_RECORDED_PER_MINUTE, 0));
        let (fate, w) = refusal_fate(None, now, false);
        assert_eq!(fate, RefusalFate::Recorded { left_out_before: 0 });
        assert_eq!(w, window(now, 0, 0));
    }

    #[test]
    fn refusals_that_changed_nothing_are_budgeted_and_the_rest_is_not() {
        for outcome in [
            "PERMISSION_DENIED",
            "INVALID_ARGUMENT",
            "NOT_FOUND",
            "FAILED_PRECONDITION",
        ] {
            assert!(is_budgeted_refusal(outcome), "{outcome}");
        }
        for outcome in [
            "OK",
            "DEADLINE_EXCEEDED",
            "UNAVAILABLE",
            "INTERNAL",
            "ABORTED",
            "UNKNOWN",
        ] {
            assert!(!is_budgeted_refusal(outcome), "{outcome}");
        }
    }
}
