//! The one guard in front of the admin core, for both adapters (gRPC `grpc::guard`, REST
//! `rest`): authenticate the caller, authorize its role for the [`AdminAction`]
//! ([`AdminAuth::admit`], pure rules in `crate::auth`), run the call only when allowed,
//! and record every mutating call of an identified caller, accepted or refused, in the
//! audit trail (a caller without valid credentials is counted and logged at a bounded
//! rate instead: `crate::auth::audit::in_trail`). An adapter
//! only says who is calling ([`Caller`]), which action it is, and how to read its own
//! answer as an outcome. Rules and roles: docs/security.md.

use std::future::Future;
use std::sync::Arc;

use tracing::warn;

use super::ApiError;
use crate::auth::{AdminAction, AdminAuth, PeerIdentity, Principal, audit};
use crate::reconcile::Cluster;

/// Who is calling, as an adapter sees it: the request's headers (`authorization: Bearer
/// TOKEN`, and on a forwarded gRPC call the forwarded-principal header), the verified
/// client certificate's identity, and the follower that forwarded the call.
///
/// Extension point: a principal comes from either a bearer token or a certificate
/// ([`crate::auth::authenticate`]); an adapter that terminates TLS with client
/// certificates fills `peer` and nothing else changes.
#[derive(Debug, Default)]
pub struct Caller {
    /// The request's headers (HTTP/2 metadata for gRPC, HTTP/1.1 headers for REST).
    pub headers: http::HeaderMap,
    /// The verified client certificate's identity; `None` for plaintext or no
    /// certificate (the REST gateway has no TLS yet).
    pub peer: Option<PeerIdentity>,
    /// The follower replica that forwarded the call, or empty.
    pub forwarded_by: String,
    /// The caller's address (of the follower, for a forwarded call), when known: named
    /// in the log line of a refusal that is not in the trail.
    pub remote_addr: Option<std::net::SocketAddr>,
}

/// How a call ended, for its audit entry: `code` is `OK` or the gRPC status code's name
/// (`PERMISSION_DENIED`, ...; REST answers are named by the same codes), `message` the
/// error message (empty when OK), `connector` the connector the answer names when the
/// request did not name it where the adapter reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `OK` or a gRPC status code name.
    pub code: &'static str,
    /// The error message; empty when OK.
    pub message: String,
    /// The connector named by the request's body, read by the handler (REST `POST
    /// /connectors`: there is no name in the path); `None`: the one the adapter passed.
    pub connector: Option<String>,
}

impl Outcome {
    /// A call that succeeded.
    pub fn ok() -> Self {
        Self::refused("OK", String::new())
    }

    /// A call that ended with status `code` and `message`.
    pub fn refused(code: &'static str, message: String) -> Self {
        Self {
            code,
            message,
            connector: None,
        }
    }
}

/// Authentication, authorization and the audit trail over one cluster; cheap to clone.
#[derive(Clone)]
pub struct Guard {
    cluster: Arc<Cluster>,
    auth: Arc<AdminAuth>,
}

impl Guard {
    /// The guard of `cluster`, checking callers with `auth`.
    pub fn new(cluster: Arc<Cluster>, auth: Arc<AdminAuth>) -> Self {
        Self { cluster, auth }
    }

    /// Who `caller` is, without deciding on an action (the REST gateway's answer to a
    /// method a path does not serve still needs a principal).
    ///
    /// # Errors
    /// [`ApiError::Auth`]: UNAUTHENTICATED, or PERMISSION_DENIED for an identity with no
    /// admin role.
    pub fn authenticate(&self, caller: &Caller) -> Result<Principal, ApiError> {
        Ok(crate::auth::authenticate(
            &caller.headers,
            caller.peer.as_ref(),
            &self.auth.credentials(),
        )?)
    }

    /// Runs `call` for `caller` if its role may make `action` on `connector` (empty when
    /// none); otherwise answers `refuse(error)` without running anything. A mutating
    /// action's outcome (read from the answer with `outcome`) is recorded in the audit
    /// trail with the principal or the identity of a refused client certificate. A call
    /// refused for want of valid credentials is not recorded (a stranger must not write
    /// to the store or evict the trail): it is counted and logged at a bounded rate
    /// ([`AdminAuth::refused_unauthenticated`]).
    pub async fn guarded<T, Fut>(
        &self,
        caller: Caller,
        action: AdminAction,
        connector: &str,
        call: impl FnOnce(Principal) -> Fut,
        refuse: impl FnOnce(ApiError) -> T,
        outcome: impl FnOnce(&T) -> Outcome,
    ) -> T
    where
        Fut: Future<Output = T>,
    {
        let Caller {
            headers,
            peer,
            forwarded_by,
            remote_addr,
        } = caller;
        let (principal, answer) = match self.auth.admit(&headers, peer.as_ref(), action) {
            Ok(p) => (Some(p.clone()), call(p).await),
            Err((p, e)) if audit::in_trail(p.as_ref(), peer.as_ref()) => {
                warn!(rpc = action.rpc(), connector = %audit::bounded_name(connector),
                    error = %e, "admin call refused");
                (p, refuse(ApiError::Auth(e)))
            }
            Err((_, e)) => {
                self.auth
                    .refused_unauthenticated(remote_addr, action.rpc(), connector, &e);
                return refuse(ApiError::Auth(e));
            }
        };
        let Outcome {
            code,
            message,
            connector: named,
        } = outcome(&answer);
        self.auth.record(
            self.cluster.store.as_ref(),
            (principal.as_ref(), peer.as_ref()),
            action,
            named.as_deref().unwrap_or(connector),
            (code, &message),
            &forwarded_by,
        );
        answer
    }
}
