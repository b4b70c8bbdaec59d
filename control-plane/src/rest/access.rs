//! Who may call which route: the admin action of each route ([`rest_access`]), the query
//! parameters it takes ([`known_params`]), and the middleware that authenticates, checks
//! and traces every request before its handler runs.

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};

use super::Gateway;
use super::RestPeer;
use super::connectors::BodyConnector;
use super::error;
use super::error::RestError;
use super::request::*;
use crate::admin::guard::{Caller, Outcome};
use crate::auth::{AdminAction, DeleteMode};

/// What a REST route needs from its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestAccess {
    /// No credentials: `GET /` (versions) and `GET /health` (KIP-1017, for probes); they
    /// read no connector, config or offsets.
    Public,
    /// The [`AdminAction`] it performs, decided by the same rules as the gRPC RPC
    /// (`crate::auth::authorize`) and audited like it when mutating.
    Action(AdminAction),
    /// A known path with a method it does not serve: the caller must authenticate, then
    /// gets 405 (a stranger learns nothing about the routes).
    Authenticated,
}

/// The access rule of `method` on `route` (axum's matched path). `delete_mode` is the
/// mode a `DELETE /connectors/{name}` asks for (from its `force` and `keepResources`
/// query parameters). Pure; every route of [`Gateway::router`] has a row in the tests.
pub fn rest_access(
    method: &axum::http::Method,
    route: &str,
    delete_mode: DeleteMode,
) -> RestAccess {
    use AdminAction as X;
    use axum::http::Method;
    let m = match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => return RestAccess::Authenticated,
    };
    RestAccess::Action(match (m, route) {
        ("GET", "/" | "/health") => return RestAccess::Public,
        ("GET", "/connectors") => X::ListConnectors,
        ("POST", "/connectors") => X::CreateConnector,
        (
            "GET",
            "/connectors/{name}" | "/connectors/{name}/config" | "/connectors/{name}/tasks",
        ) => X::GetConnector,
        ("DELETE", "/connectors/{name}") => X::DeleteConnector(delete_mode),
        ("PUT" | "PATCH", "/connectors/{name}/config") => X::PutConnectorConfig,
        ("GET", "/connectors/{name}/status" | "/connectors/{name}/tasks/{task}/status") => {
            X::GetConnectorStatus
        }
        ("POST", "/connectors/{name}/tasks/{task}/restart") => X::RestartTask,
        ("PUT", "/connectors/{name}/pause") => X::PauseConnector,
        ("PUT", "/connectors/{name}/resume") => X::ResumeConnector,
        ("PUT", "/connectors/{name}/stop") => X::StopConnector,
        ("POST", "/connectors/{name}/restart") => X::RestartConnector,
        ("POST", "/connectors/{name}/cleanup/retry") => X::RetryCleanup,
        ("GET", "/connectors/{name}/offsets") => X::GetOffsets,
        ("PATCH", "/connectors/{name}/offsets") => X::AlterOffsets,
        ("DELETE", "/connectors/{name}/offsets") => X::ResetOffsets,
        ("GET", "/connector-plugins" | "/connector-plugins/{class}/config") => {
            X::ListConnectorPlugins
        }
        ("PUT", "/connector-plugins/{class}/config/validate") => X::ValidateConnectorConfig,
        ("GET", "/connectors/{name}/resources") => X::GetConnectorResources,
        ("GET", "/connectors/{name}/topics") => X::GetConnectorTopics,
        ("PUT", "/connectors/{name}/topics/reset") => X::ResetConnectorTopics,
        ("GET", "/resources/orphaned") => X::ListOrphanedResources,
        ("POST", "/resources/orphaned/adopt") => X::AdoptOrphanedResources,
        ("POST", "/resources/orphaned/purge") => X::PurgeOrphanedResources,
        ("GET", "/admin/loggers" | "/admin/loggers/{logger}") => X::GetLoggers,
        ("PUT", "/admin/loggers/{logger}") => X::SetLoggerLevel,
        _ => return RestAccess::Authenticated,
    })
}

/// The query parameters `method` on `route` (axum's matched path) takes: Kafka Connect's
/// own, Wharf's extensions (docs/rest.md), and `forward`, which Connect's workers send
/// each other and Wharf accepts and ignores on every route (one control plane answers).
/// Pure; a parameter outside this list is a 400 naming it (`unknown_param`), so a typo
/// such as `?Force=true` is refused instead of running a plain delete.
pub fn known_params(method: &axum::http::Method, route: &str) -> &'static [&'static str] {
    use axum::http::Method;
    match (method, route) {
        (&Method::GET, "/connectors") => &["expand", "forward"],
        (&Method::DELETE, "/connectors/{name}") => &[
            "force",
            "keepResources",
            "wait",
            "waitTimeoutMs",
            "dryRun",
            "forward",
        ],
        (&Method::POST, "/connectors/{name}/restart") => &["includeTasks", "onlyFailed", "forward"],
        (&Method::GET, "/connector-plugins") => &["connectorsOnly", "forward"],
        (&Method::PUT, "/admin/loggers/{logger}") => &["scope", "forward"],
        _ => &["forward"],
    }
}

/// The first query parameter of `query` that `method` on `route` does not take, as the
/// 400 that names it and the parameters the route does take.
pub(super) fn unknown_param(
    method: &axum::http::Method,
    route: &str,
    query: Option<&str>,
) -> Option<RestError> {
    let pairs = match query_pairs(&RawQuery(query.map(str::to_owned))) {
        Ok(p) => p,
        Err(e) => return Some(e),
    };
    let known = known_params(method, route);
    let (key, _) = pairs.iter().find(|(k, _)| !known.contains(&k.as_str()))?;
    Some(RestError::BadRequest(format!(
        "unknown query parameter {key:?}: {method} {route} takes {}",
        known.join(", ")
    )))
}

/// The deletion mode of a `DELETE /connectors/{name}` query, from its `force` and
/// `keepResources`. When either cannot be read (or the query does not parse) the mode
/// the caller meant is unknown, so it is authorized as the strictest, never lowering the
/// role needed. Other parameters do not change the mode: an unknown one or a
/// `waitTimeoutMs` without `wait=true` is refused (400 naming it) after authorization
/// for the mode `force` and `keepResources` give, so the 400 tells the caller which
/// parameter was wrong instead of a 403 for a mode nobody asked for.
pub(super) fn delete_mode(query: Option<&str>) -> DeleteMode {
    let pairs = query_pairs(&RawQuery(query.map(str::to_owned)));
    let mode = pairs.and_then(|p| {
        Ok(DeleteMode::of(
            flag(&p, "force")?,
            flag(&p, "keepResources")?,
        ))
    });
    mode.unwrap_or(DeleteMode::ForceKeepResources)
}

/// In front of every route: one tracing span per request (named after the admin action,
/// as the gRPC server's `rpc` span), then the admin [`Guard`] shared with gRPC: a bearer
/// token (`Authorization: Bearer TOKEN`) authenticates, the role is authorized for the
/// route's [`AdminAction`] ([`rest_access`]), a refusal is 401 or 403 in Kafka Connect's
/// error body and runs nothing, and every mutating call of an identified caller, accepted
/// or refused, is in the audit trail (a 401 is counted and logged at a bounded rate). Over HTTPS a verified admin client certificate (`Caller::peer`) is a
/// principal too, as on gRPC.
pub(super) async fn admit(
    State(g): State<Gateway>,
    route: axum::extract::MatchedPath,
    params: Result<axum::extract::RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let connection = req
        .extensions()
        .get::<axum::extract::ConnectInfo<RestPeer>>()
        .map(|c| &c.0.0);
    let peer = crate::auth::peer_identity(connection);
    let remote_addr = connection.and_then(|c| c.remote_addr);
    // Only a follower (the control-plane certificate) forwards a caller's principal;
    // from anyone else the header is a forgery.
    if !matches!(peer, Some(crate::auth::PeerIdentity::ControlPlane)) {
        req.headers_mut()
            .remove(crate::auth::FORWARDED_PRINCIPAL_HEADER);
    }
    let access = rest_access(req.method(), route.as_str(), delete_mode(req.uri().query()));
    let unknown = unknown_param(req.method(), route.as_str(), req.uri().query());
    let action = match access {
        RestAccess::Public => {
            return match unknown {
                Some(e) => e.into_response(),
                None => next.run(req).await,
            };
        }
        RestAccess::Action(a) => Some(a),
        RestAccess::Authenticated => None,
    };
    let rpc = action.map_or("-", AdminAction::rpc);
    // Like an rpc span: a status poller's GETs are not exported (docs/observability.md).
    let parent = wharf::trace::parent_from_headers(req.headers());
    let span = if wharf::trace::exported(rest_call_kind(action), parent.is_sampled()) {
        wharf::trace::DirectSpan::started(
            &parent,
            wharf::trace::SpanBuilder::from_name("rest")
                .with_kind(wharf::trace::SpanKind::Server)
                .with_attributes([
                    wharf::trace::KeyValue::new("method", req.method().to_string()),
                    wharf::trace::KeyValue::new("route", route.as_str().to_owned()),
                    wharf::trace::KeyValue::new("rpc", rpc),
                ]),
            tracing::info_span!("rest", method = %req.method(), route = %route.as_str(), rpc,
                trace_id = tracing::field::Empty),
        )
    } else {
        wharf::trace::DirectSpan::untraced(tracing::debug_span!("rest", method = %req.method(),
            route = %route.as_str(), rpc))
    };
    let connector = params
        .ok()
        .and_then(|p| {
            p.iter()
                .find(|(k, _)| *k == "name")
                .map(|(_, v)| v.to_owned())
        })
        .unwrap_or_default();
    let caller = Caller {
        headers: req.headers().clone(),
        // Over HTTPS, a verified admin client certificate is a principal too.
        peer,
        // The follower that forwarded the request (`rest::forward`), as gRPC records it.
        forwarded_by: req
            .headers()
            .get(crate::grpc::leader_route::FORWARDED_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        remote_addr,
    };
    let Some(action) = action else {
        // Authenticate only (any role), then the router's 405.
        let answer = async move {
            match g.guard.authenticate(&caller) {
                Ok(_) => next.run(req).await,
                Err(e) => RestError::Api(e).into_response(),
            }
        };
        return span.ended_with(answer, rest_outcome).await;
    };
    let answer = g.guard.guarded(
        caller,
        action,
        &connector,
        // Checked once authorized, so a refused query is audited like the call.
        |principal| async move {
            match unknown {
                Some(e) => e.into_response(),
                None => {
                    // Who asked, for the handlers that decide by it (`Caller`).
                    req.extensions_mut().insert(principal);
                    next.run(req).await
                }
            }
        },
        |e| RestError::Api(e).into_response(),
        |answer| {
            let outcome = match answer.extensions().get::<error::Refusal>() {
                Some(r) => r.0.clone(),
                None if answer.status().is_success() => Outcome::ok(),
                // Not a RestError (axum's own answer): named by its HTTP status.
                None => Outcome::refused("UNKNOWN", format!("HTTP {}", answer.status())),
            };
            Outcome {
                connector: answer
                    .extensions()
                    .get::<BodyConnector>()
                    .map(|c| c.0.clone()),
                ..outcome
            }
        },
    );
    span.ended_with(answer, rest_outcome).await
}

/// What a REST call's span says of its answer: status error for a 5xx, and the status
/// code as `http.response.status_code` (OpenTelemetry's HTTP semantic conventions).
pub(super) fn rest_outcome(
    r: &axum::response::Response,
) -> (Option<String>, Option<wharf::trace::KeyValue>) {
    (
        r.status()
            .is_server_error()
            .then(|| format!("HTTP {}", r.status())),
        Some(wharf::trace::KeyValue::new(
            "http.response.status_code",
            i64::from(r.status().as_u16()),
        )),
    )
}

/// What a REST call does, for [`wharf::trace::exported`]: the action's kind when it
/// names one (mutating: a change), a read otherwise (authenticate-only routes).
pub(super) fn rest_call_kind(action: Option<AdminAction>) -> wharf::trace::CallKind {
    match action.map(AdminAction::is_mutating) {
        Some(true) => wharf::trace::CallKind::Change,
        Some(false) | None => wharf::trace::CallKind::Read,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::*;

    #[test]
    fn a_rest_call_that_changes_something_is_a_change() {
        assert_eq!(
            rest_call_kind(Some(AdminAction::DeleteConnector(DeleteMode::Force))),
            wharf::trace::CallKind::Change
        );
        assert_eq!(
            rest_call_kind(Some(AdminAction::SetLoggerLevel)),
            wharf::trace::CallKind::Change
        );
    }

    #[test]
    fn a_rest_status_read_is_a_read() {
        assert_eq!(
            rest_call_kind(Some(AdminAction::GetConnectorStatus)),
            wharf::trace::CallKind::Read
        );
    }

    #[test]
    fn an_authenticate_only_route_is_a_read() {
        assert_eq!(rest_call_kind(None), wharf::trace::CallKind::Read);
    }

    /// Every route of the router with its access rule: the REST side of the one role
    /// table (`auth::roles`), so a REST caller may do exactly what it may over gRPC.
    #[test]
    fn every_route_maps_to_the_admin_action_of_its_grpc_method() {
        use AdminAction as X;
        use DeleteMode as M;
        use RestAccess::{Action, Authenticated, Public};
        let cleanup = M::Cleanup;
        let cases = [
            (
                Method::GET,
                "/connectors/{name}/resources",
                cleanup,
                Action(X::GetConnectorResources),
            ),
            (
                Method::GET,
                "/resources/orphaned",
                cleanup,
                Action(X::ListOrphanedResources),
            ),
            (
                Method::GET,
                "/connectors/{name}/topics",
                cleanup,
                Action(X::GetConnectorTopics),
            ),
            (
                Method::PUT,
                "/connectors/{name}/topics/reset",
                cleanup,
                Action(X::ResetConnectorTopics),
            ),
            (
                Method::POST,
                "/resources/orphaned/adopt",
                cleanup,
                Action(X::AdoptOrphanedResources),
            ),
            (
                Method::POST,
                "/resources/orphaned/purge",
                cleanup,
                Action(X::PurgeOrphanedResources),
            ),
            (Method::GET, "/", cleanup, Public),
            (Method::GET, "/health", cleanup, Public),
            (
                Method::GET,
                "/connectors",
                cleanup,
                Action(X::ListConnectors),
            ),
            (
                Method::POST,
                "/connectors",
                cleanup,
                Action(X::CreateConnector),
            ),
            (
                Method::GET,
                "/connectors/{name}",
                cleanup,
                Action(X::GetConnector),
            ),
            (
                Method::GET,
                "/connectors/{name}/config",
                cleanup,
                Action(X::GetConnector),
            ),
            (
                Method::GET,
                "/connectors/{name}/tasks",
                cleanup,
                Action(X::GetConnector),
            ),
            (
                Method::DELETE,
                "/connectors/{name}",
                cleanup,
                Action(X::DeleteConnector(M::Cleanup)),
            ),
            (
                Method::DELETE,
                "/connectors/{name}",
                M::Force,
                Action(X::DeleteConnector(M::Force)),
            ),
            (
                Method::DELETE,
                "/connectors/{name}",
                M::KeepResources,
                Action(X::DeleteConnector(M::KeepResources)),
            ),
            (
                Method::PUT,
                "/connectors/{name}/config",
                cleanup,
                Action(X::PutConnectorConfig),
            ),
            (
                Method::PATCH,
                "/connectors/{name}/config",
                cleanup,
                Action(X::PutConnectorConfig),
            ),
            (
                Method::GET,
                "/connectors/{name}/status",
                cleanup,
                Action(X::GetConnectorStatus),
            ),
            (
                Method::GET,
                "/connectors/{name}/tasks/{task}/status",
                cleanup,
                Action(X::GetConnectorStatus),
            ),
            (
                Method::POST,
                "/connectors/{name}/tasks/{task}/restart",
                cleanup,
                Action(X::RestartTask),
            ),
            (
                Method::PUT,
                "/connectors/{name}/pause",
                cleanup,
                Action(X::PauseConnector),
            ),
            (
                Method::PUT,
                "/connectors/{name}/resume",
                cleanup,
                Action(X::ResumeConnector),
            ),
            (
                Method::PUT,
                "/connectors/{name}/stop",
                cleanup,
                Action(X::StopConnector),
            ),
            (
                Method::POST,
                "/connectors/{name}/restart",
                cleanup,
                Action(X::RestartConnector),
            ),
            (
                Method::POST,
                "/connectors/{name}/cleanup/retry",
                cleanup,
                Action(X::RetryCleanup),
            ),
            (
                Method::GET,
                "/connectors/{name}/offsets",
                cleanup,
                Action(X::GetOffsets),
            ),
            (
                Method::PATCH,
                "/connectors/{name}/offsets",
                cleanup,
                Action(X::AlterOffsets),
            ),
            (
                Method::DELETE,
                "/connectors/{name}/offsets",
                cleanup,
                Action(X::ResetOffsets),
            ),
            (
                Method::GET,
                "/connector-plugins",
                cleanup,
                Action(X::ListConnectorPlugins),
            ),
            (
                Method::GET,
                "/connector-plugins/{class}/config",
                cleanup,
                Action(X::ListConnectorPlugins),
            ),
            (
                Method::PUT,
                "/connector-plugins/{class}/config/validate",
                cleanup,
                Action(X::ValidateConnectorConfig),
            ),
            (
                Method::GET,
                "/admin/loggers",
                cleanup,
                Action(X::GetLoggers),
            ),
            (
                Method::GET,
                "/admin/loggers/{logger}",
                cleanup,
                Action(X::GetLoggers),
            ),
            (
                Method::PUT,
                "/admin/loggers/{logger}",
                cleanup,
                Action(X::SetLoggerLevel),
            ),
            // A method the path does not serve: authenticate, then 405.
            (Method::POST, "/connectors/{name}", cleanup, Authenticated),
            (Method::OPTIONS, "/connectors", cleanup, Authenticated),
        ];
        for (m, route, mode, want) in cases {
            assert_eq!(rest_access(&m, route, mode), want, "{m} {route} {mode:?}");
            if let Action(a) = want {
                assert_ne!(a.rpc(), "", "{m} {route}");
            }
        }
    }

    #[test]
    fn a_delete_query_gives_its_mode_and_a_malformed_one_the_strictest() {
        assert_eq!(delete_mode(None), DeleteMode::Cleanup);
        assert_eq!(delete_mode(Some("wait=true")), DeleteMode::Cleanup);
        assert_eq!(delete_mode(Some("force=true")), DeleteMode::Force);
        assert_eq!(
            delete_mode(Some("keepResources=true")),
            DeleteMode::KeepResources
        );
        assert_eq!(
            delete_mode(Some("force=true&keepResources=true")),
            DeleteMode::ForceKeepResources
        );
        assert_eq!(
            delete_mode(Some("force=yes")),
            DeleteMode::ForceKeepResources
        );
    }

    #[test]
    fn a_delete_query_refused_for_another_parameter_keeps_the_mode_of_force_and_keep_resources() {
        assert_eq!(delete_mode(Some("keepresources=true")), DeleteMode::Cleanup);
        assert_eq!(delete_mode(Some("force=true&Wait=true")), DeleteMode::Force);
        assert_eq!(delete_mode(Some("waitTimeoutMs=5")), DeleteMode::Cleanup);
    }

    #[test]
    fn a_query_parameter_the_route_does_not_take_is_refused_by_name() {
        use axum::http::Method;
        let del = "/connectors/{name}";
        assert!(unknown_param(&Method::DELETE, del, None).is_none());
        assert!(unknown_param(&Method::DELETE, del, Some("force=true&wait=true")).is_none());
        assert!(unknown_param(&Method::DELETE, del, Some("forward=false")).is_none());
        let e = unknown_param(&Method::DELETE, del, Some("Force=true")).expect("refused");
        assert!(e.to_string().contains("\"Force\""), "{e}");
        assert!(e.to_string().contains("force, keepResources"), "{e}");
        let pause = "/connectors/{name}/pause";
        assert!(unknown_param(&Method::PUT, pause, Some("force=true")).is_some());
        let list = "/connectors";
        assert!(unknown_param(&Method::GET, list, Some("expand=status")).is_none());
        assert!(unknown_param(&Method::GET, list, Some("expnd=status")).is_some());
        let restart = "/connectors/{name}/restart";
        assert!(unknown_param(&Method::POST, restart, Some("includeTasks&onlyFailed")).is_none());
        assert!(
            unknown_param(
                &Method::GET,
                "/connector-plugins",
                Some("connectorsOnly=true")
            )
            .is_none()
        );
        assert!(
            unknown_param(
                &Method::PUT,
                "/admin/loggers/{logger}",
                Some("scope=worker")
            )
            .is_none()
        );
        assert!(unknown_param(&Method::GET, "/health", Some("verbose=1")).is_some());
    }
}
