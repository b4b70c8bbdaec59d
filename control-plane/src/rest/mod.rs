//! The Kafka Connect REST gateway: an HTTP/1.1 listener (`--rest-listen`) with Kafka
//! Connect 4.x's routes, JSON shapes and status codes, a thin adapter over the admin core
//! ([`crate::admin`]) like the gRPC service: no rule lives here, only the translation of
//! requests and answers. Errors become Connect's `{"error_code", "message"}` body in one
//! place ([`error`]). Routes, the gRPC method behind each, and every remaining
//! difference from Kafka Connect: `docs/rest.md`.

pub mod error;
pub mod json;
pub mod loggers;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tracing::info;
use wharf::pb::v1 as pb;

use self::error::RestError;
use self::loggers::Loggers;
use crate::admin::guard::{Caller, Guard, Outcome};
use crate::admin::{Admin, DeleteOptions, RestartScope};
use crate::auth::audit::bounded_name;
use crate::auth::{AdminAction, DeleteMode, Principal};
use crate::model::{DeletionMode, TargetState};

/// Largest request body the gateway reads, in bytes (a config is at most 256 KiB, see
/// `grpc::convert`; offsets bodies are the larger ones).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// The Kafka Connect REST API level this gateway answers as, in `GET /`.
pub const CONNECT_API_VERSION: &str = "4.0.0";
/// `kafka_cluster_id` in `GET /`: Wharf has no Kafka cluster behind it.
pub const CLUSTER_ID: &str = "wharf";

/// Shared state of the handlers.
#[derive(Clone)]
pub struct Gateway {
    admin: Admin,
    guard: Guard,
    loggers: Arc<Loggers>,
}

type RestResult = Result<Response, RestError>;

impl Gateway {
    /// A gateway over `admin`, callers checked by `guard` (the one the gRPC service
    /// uses); `loggers` changes log levels at run time.
    pub fn new(admin: Admin, guard: Guard, loggers: Arc<Loggers>) -> Self {
        Self {
            admin,
            guard,
            loggers,
        }
    }

    /// The routes. Unknown paths answer 404, known paths with another method 405, both
    /// with Connect's error body.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(root))
            .route("/health", get(health))
            .route("/connectors", get(list).post(create))
            .route("/connectors/{name}", get(connector).delete(delete))
            .route(
                "/connectors/{name}/config",
                get(config).put(put_config).patch(patch_config),
            )
            .route("/connectors/{name}/status", get(status))
            .route("/connectors/{name}/tasks", get(tasks))
            .route("/connectors/{name}/tasks/{task}/status", get(task_status))
            .route(
                "/connectors/{name}/tasks/{task}/restart",
                post(restart_task),
            )
            .route("/connectors/{name}/pause", put(pause))
            .route("/connectors/{name}/resume", put(resume))
            .route("/connectors/{name}/stop", put(stop))
            .route("/connectors/{name}/restart", post(restart))
            .route("/connectors/{name}/cleanup/retry", post(retry_cleanup))
            .route(
                "/connectors/{name}/offsets",
                get(offsets).patch(alter_offsets).delete(reset_offsets),
            )
            .route("/connector-plugins", get(plugins))
            .route("/connector-plugins/{class}/config", get(plugin_config))
            .route("/connector-plugins/{class}/config/validate", put(validate))
            .route("/admin/loggers", get(all_loggers))
            .route("/admin/loggers/{logger}", get(logger).put(set_logger))
            .fallback(|| async { RestError::NoRoute })
            .method_not_allowed_fallback(|| async { RestError::MethodNotAllowed })
            .route_layer(axum::middleware::from_fn_with_state(self.clone(), admit))
            .with_state(self)
    }
}

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
        ("GET", "/admin/loggers" | "/admin/loggers/{logger}") => X::GetLoggers,
        ("PUT", "/admin/loggers/{logger}") => X::SetLoggerLevel,
        _ => return RestAccess::Authenticated,
    })
}

/// The query parameters `method` on `route` (axum's matched path) takes: Kafka Connect's
/// own, Wharf's extensions (docs/rest.md), and `forward`, which Connect's workers send
/// each other and Wharf accepts and ignores on every route (one control plane answers).
/// Pure; a parameter outside this list is a 400 naming it ([`unknown_param`]), so a typo
/// such as `?Force=true` is refused instead of running a plain delete.
pub fn known_params(method: &axum::http::Method, route: &str) -> &'static [&'static str] {
    use axum::http::Method;
    match (method, route) {
        (&Method::GET, "/connectors") => &["expand", "forward"],
        (&Method::DELETE, "/connectors/{name}") => {
            &["force", "keepResources", "wait", "waitTimeoutMs", "forward"]
        }
        (&Method::POST, "/connectors/{name}/restart") => &["includeTasks", "onlyFailed", "forward"],
        (&Method::GET, "/connector-plugins") => &["connectorsOnly", "forward"],
        (&Method::PUT, "/admin/loggers/{logger}") => &["scope", "forward"],
        _ => &["forward"],
    }
}

/// The first query parameter of `query` that `method` on `route` does not take, as the
/// 400 that names it and the parameters the route does take.
fn unknown_param(
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
fn delete_mode(query: Option<&str>) -> DeleteMode {
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
async fn admit(
    State(g): State<Gateway>,
    route: axum::extract::MatchedPath,
    params: Result<axum::extract::RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // REST never forwards a call to another replica (docs/rest.md), so a forwarded
    // principal header here is a forgery, whoever sends it.
    req.headers_mut()
        .remove(crate::auth::FORWARDED_PRINCIPAL_HEADER);
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
    let connection = req
        .extensions()
        .get::<axum::extract::ConnectInfo<RestPeer>>()
        .map(|c| &c.0.0);
    let caller = Caller {
        headers: req.headers().clone(),
        // Over HTTPS, a verified admin client certificate is a principal too.
        peer: crate::auth::peer_identity(connection),
        forwarded_by: String::new(),
        remote_addr: connection.and_then(|c| c.remote_addr),
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
fn rest_outcome(r: &axum::response::Response) -> (Option<String>, Option<wharf::trace::KeyValue>) {
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
fn rest_call_kind(action: Option<AdminAction>) -> wharf::trace::CallKind {
    match action.map(AdminAction::is_mutating) {
        Some(true) => wharf::trace::CallKind::Change,
        Some(false) | None => wharf::trace::CallKind::Read,
    }
}

/// Serves `router` on `listener` (HTTP/1.1, and HTTP/2) until `shutdown` resolves: HTTPS
/// with the control plane's certificate when `tls` is set (the same rules as the gRPC
/// listener, docs/security.md, but ALPN offers `http/1.1` besides `h2`), plaintext
/// otherwise. A connection that sends no request for `timeout` is closed
/// ([`wharf::http::REQUEST_HEADER_TIMEOUT`] outside tests). Handlers can read the caller's
/// connection (address, client certificate) with `ConnectInfo<RestPeer>`.
///
/// # Errors
/// When the listener's address cannot be read.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<wharf::tls::Tls>>,
    router: Router,
    timeout: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    info!(%addr, https = tls.is_some(), "Kafka Connect REST gateway listening");
    let incoming = RestIncoming {
        addr,
        connections: wharf::tls::serve_incoming_https(listener, tls),
    };
    wharf::http::serve(
        incoming,
        router,
        |io: &wharf::tls::ServerIo, _| RestPeer(io.peer_info().clone()),
        timeout,
        shutdown,
    )
    .await;
    Ok(())
}

/// The connections of the REST listener, TLS handshakes done by
/// [`wharf::tls::serve_incoming_https`].
struct RestIncoming {
    addr: std::net::SocketAddr,
    connections: tokio_stream::wrappers::ReceiverStream<std::io::Result<wharf::tls::ServerIo>>,
}

impl axum::serve::Listener for RestIncoming {
    type Io = wharf::tls::ServerIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        use tokio_stream::StreamExt;
        loop {
            match self.connections.next().await {
                Some(Ok(io)) => {
                    let remote = io.peer_info().remote_addr.unwrap_or(self.addr);
                    return (io, remote);
                }
                Some(Err(e)) => tracing::warn!(error = %e, "REST accept failed"),
                // The accept loop only ends when this stream is dropped.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// The caller of one REST connection: address, whether it is TLS, client certificate.
#[derive(Debug, Clone)]
pub struct RestPeer(pub wharf::tls::PeerInfo);

// ---- request parsing -------------------------------------------------------------

/// A path part, percent-decoded; a bad escape is a 400.
fn path_part(
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<String, RestError> {
    p.map(|Path(s)| s)
        .map_err(|e| RestError::BadRequest(format!("bad path: {e}")))
}

/// The query's `key=value` pairs, in order (keys may repeat, as `expand` does).
fn query_pairs(q: &RawQuery) -> Result<Vec<(String, String)>, RestError> {
    match &q.0 {
        None => Ok(Vec::new()),
        Some(q) => serde_urlencoded::from_str::<Vec<(String, String)>>(q)
            .map_err(|e| RestError::BadRequest(format!("bad query string: {e}"))),
    }
}

/// A boolean query parameter (`true` / `false`, any case; absent means `false`).
fn flag(pairs: &[(String, String)], name: &str) -> Result<bool, RestError> {
    match pairs.iter().rev().find(|(k, _)| k == name) {
        None => Ok(false),
        Some((_, v)) if v.eq_ignore_ascii_case("true") || v.is_empty() => Ok(true),
        Some((_, v)) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some((_, v)) => Err(RestError::BadRequest(format!(
            "query parameter {name}={v:?} is not true or false"
        ))),
    }
}

/// How much of an oversized body is read and dropped before the 413 is sent, in bytes: a
/// client still writing it then reads the answer instead of a broken pipe. Beyond this the
/// connection is closed.
pub const MAX_DRAIN_BYTES: usize = 64 * 1024 * 1024;

/// Reads and drops `body`, up to [`MAX_DRAIN_BYTES`].
async fn drain(body: Body) {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut seen = 0usize;
    while let Some(Ok(chunk)) = stream.next().await {
        seen += chunk.len();
        if seen > MAX_DRAIN_BYTES {
            break;
        }
    }
}

/// How long a request's body may take to arrive after its headers: as long as the
/// headers may take ([`wharf::http::REQUEST_HEADER_TIMEOUT`], 20 s). A client that
/// sends a body a byte at a time would otherwise hold its connection (and a file
/// descriptor) for as long as it likes.
pub const BODY_READ_TIMEOUT: std::time::Duration = wharf::http::REQUEST_HEADER_TIMEOUT;

/// Reads a JSON body: `application/json` (or no content type), at most
/// [`MAX_BODY_BYTES`], whole within [`BODY_READ_TIMEOUT`] (else 408), well-formed.
async fn json_body(headers: &HeaderMap, body: Body) -> Result<Value, RestError> {
    json_body_within(headers, body, BODY_READ_TIMEOUT).await
}

/// [`json_body`] with the body read bounded by `timeout`.
async fn json_body_within(
    headers: &HeaderMap,
    body: Body,
    timeout: std::time::Duration,
) -> Result<Value, RestError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let essence = ct
            .to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if essence != "application/json" {
            return Err(RestError::UnsupportedMediaType);
        }
    }
    // Refused before reading when the length is announced.
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if announced.is_some_and(|n| n > MAX_BODY_BYTES) {
        let _ = tokio::time::timeout(timeout, drain(body)).await;
        return Err(RestError::PayloadTooLarge(MAX_BODY_BYTES));
    }
    let bytes: Bytes = tokio::time::timeout(timeout, axum::body::to_bytes(body, MAX_BODY_BYTES))
        .await
        .map_err(|_| RestError::BodyTimeout(timeout.as_secs()))?
        .map_err(|e| body_read_refusal(&e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| RestError::BadRequest(format!("request body is not valid JSON: {e}")))
}

/// The top-level fields of `POST /connectors`, as Kafka Connect's
/// `CreateConnectorRequest` has them.
pub const CREATE_FIELDS: &[&str] = &["name", "config", "initial_state"];
/// The top-level fields of `PATCH /connectors/{name}/offsets` (KIP-875).
pub const ALTER_OFFSETS_FIELDS: &[&str] = &["offsets"];
/// The fields of one entry of `PATCH /connectors/{name}/offsets` (KIP-875).
pub const OFFSET_ENTRY_FIELDS: &[&str] = &["partition", "offset"];
/// The fields of `PUT /admin/loggers/{logger}`.
pub const SET_LOGGER_FIELDS: &[&str] = &["level"];

/// The 400 for the first field of the JSON object `body` (`what` names it in the
/// message: "the body", "offsets[0]") that is not one of `known`, suggesting the known
/// field it differs from only in case, `_` or `-` (`initialState` for `initial_state`);
/// `None` when every field is known or `body` is not an object (its handler says what
/// it must be). Pure. Kafka Connect refuses unknown fields the same way (Jackson's
/// FAIL_ON_UNKNOWN_PROPERTIES): a misspelt `initial_state` must not create a RUNNING
/// connector. Config maps are free-form and not checked here.
pub fn unknown_field(body: &Value, what: &str, known: &[&str]) -> Option<RestError> {
    let Value::Object(fields) = body else {
        return None;
    };
    let (key, _) = fields.iter().find(|(k, _)| !known.contains(&k.as_str()))?;
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let hint = known
        .iter()
        .find(|k| squash(k) == squash(key))
        .map(|k| format!("; did you mean {k:?}?"))
        .unwrap_or_default();
    Some(RestError::BadRequest(format!(
        "unknown field {key:?} in {what}: the fields are {}{hint}",
        known.join(", ")
    )))
}

/// The answer to a body that could not be read whole (`err`, from reading it with the
/// [`MAX_BODY_BYTES`] limit): 413 only when the limit was passed (the limit's error is in
/// `err`'s source chain); anything else (a client that sent less than its
/// Content-Length and closed, a broken chunked encoding) is a malformed request, 400,
/// whose answer the client may never read. Pure.
fn body_read_refusal(err: &(dyn std::error::Error + 'static)) -> RestError {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if e.is::<http_body_util::LengthLimitError>() {
            return RestError::PayloadTooLarge(MAX_BODY_BYTES);
        }
        cause = e.source();
    }
    // Each layer names its step, the innermost the cause; a layer repeating its source's
    // text adds nothing.
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(e) = cause {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(&format!(": {more}"));
        }
        cause = e.source();
    }
    RestError::BadRequest(format!(
        "request body could not be read whole (cut short before its announced length?): {text}"
    ))
}

/// A config map from JSON: strings as they are, numbers and booleans as their text (as
/// Kafka Connect accepts `"tasks.max": 1`); `null` only when `nulls_remove` (PATCH).
fn config_map(v: &Value, what: &str) -> Result<BTreeMap<String, Option<String>>, RestError> {
    let Value::Object(m) = v else {
        return Err(RestError::BadRequest(format!(
            "{what} must be a JSON object of strings"
        )));
    };
    m.iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                Value::Null => None,
                Value::Array(_) | Value::Object(_) => {
                    return Err(RestError::BadRequest(format!(
                        "{what}[{k}] must be a string, not a JSON {}",
                        if v.is_array() { "array" } else { "object" }
                    )));
                }
            };
            Ok((k.clone(), text))
        })
        .collect()
}

/// The 400 of a config body whose `name` key (`given`; `None` for a JSON `null`) is not
/// the connector name `name` of the path, or `None` when it is. One text for PUT and
/// PATCH; both names quoted as JSON strings and cut by [`bounded_name`]. Pure.
fn name_mismatch(given: Option<&str>, name: &str) -> Option<RestError> {
    let shown = match given {
        Some(g) if g == name => return None,
        Some(g) => format!("{:?}", bounded_name(g)),
        None => "null".to_owned(),
    };
    Some(RestError::BadRequest(format!(
        "config[{}] is {shown}, which does not match the connector name {:?} in the path: leave it out or make them equal",
        json::NAME_KEY,
        bounded_name(name)
    )))
}

/// A full config (no nulls) without Connect's `name` key, which must match `name`.
fn full_config(v: &Value, name: &str) -> Result<HashMap<String, String>, RestError> {
    let mut out = HashMap::new();
    for (k, val) in config_map(v, "config")? {
        let Some(val) = val else {
            return Err(RestError::BadRequest(format!(
                "config[{k}] must be a string, not null"
            )));
        };
        if k == json::NAME_KEY {
            if let Some(e) = name_mismatch(Some(&val), name) {
                return Err(e);
            }
            continue;
        }
        out.insert(k, val);
    }
    Ok(out)
}

fn ok(v: Value) -> RestResult {
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}

fn with_status(code: StatusCode, v: Value) -> RestResult {
    Ok((code, axum::Json(v)).into_response())
}

fn empty(code: StatusCode) -> RestResult {
    Ok(code.into_response())
}

// ---- handlers ----------------------------------------------------------------------

async fn root() -> RestResult {
    ok(json!({
        "version": CONNECT_API_VERSION,
        "commit": concat!("wharf-", env!("CARGO_PKG_VERSION")),
        "kafka_cluster_id": CLUSTER_ID,
        "wharf_version": env!("CARGO_PKG_VERSION"),
    }))
}

/// KIP-1017: 200 healthy when the store answers, 500 unhealthy otherwise.
async fn health(State(g): State<Gateway>) -> RestResult {
    match g.admin.executors() {
        Ok(_) => ok(json!({
            "status": "healthy",
            "message": "the control plane is serving requests",
        })),
        Err(e) => with_status(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "status": "unhealthy", "message": e.to_string() }),
        ),
    }
}

/// `GET /connectors`: names; with `expand=status` and/or `expand=info`, an object by
/// name with the chosen parts.
async fn list(State(g): State<Gateway>, q: RawQuery) -> RestResult {
    let pairs = query_pairs(&q)?;
    let mut with_status = false;
    let mut with_info = false;
    for (k, v) in &pairs {
        if k == "expand" {
            match v.as_str() {
                "status" => with_status = true,
                "info" => with_info = true,
                other => {
                    return Err(RestError::BadRequest(format!(
                        "expand={other:?}: expand takes status or info"
                    )));
                }
            }
        }
    }
    let all = g.admin.list(with_info, with_status)?;
    if !with_status && !with_info {
        return ok(json!(all.into_iter().map(|c| c.name).collect::<Vec<_>>()));
    }
    let mut out = serde_json::Map::new();
    for c in all {
        let mut entry = serde_json::Map::new();
        if let Some(info) = &c.info {
            entry.insert("info".into(), json::connector_info(info));
        }
        if let Some(s) = &c.status {
            entry.insert("status".into(), json::connector_status(s));
        }
        out.insert(c.name, Value::Object(entry));
    }
    ok(Value::Object(out))
}

/// The connector a request names in its body rather than its path (`POST /connectors`),
/// put on the answer by the handler so that the audit entry names it as gRPC's does.
#[derive(Debug, Clone)]
struct BodyConnector(String);

/// `POST /connectors` `{"name", "config", "initial_state"?}`: 201 with the connector.
/// The answer, success or refusal, carries the body's name for the audit trail
/// ([`BodyConnector`]) once the body has one.
async fn create(
    State(g): State<Gateway>,
    axum::Extension(caller): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let named = async {
        let v = json_body(&headers, body).await?;
        let name = match v.get("name") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(RestError::BadRequest("name must be a string".into())),
            None => match v.get("config").and_then(|c| c.get(json::NAME_KEY)) {
                Some(Value::String(s)) => s.clone(),
                _ => {
                    return Err(RestError::BadRequest(
                        "the body has no name: send {\"name\": ..., \"config\": {...}}".into(),
                    ));
                }
            },
        };
        Ok((v, name))
    };
    let (v, name) = match named.await {
        Ok(named) => named,
        Err(e) => return e.into_response(),
    };
    let mut answer = match unknown_field(&v, "the body", CREATE_FIELDS) {
        Some(e) => e.into_response(),
        None => create_named(&g, &caller, &v, &name).await.into_response(),
    };
    answer.extensions_mut().insert(BodyConnector(name));
    answer
}

/// The rest of [`create`], for the connector `name` the body `v` names.
async fn create_named(g: &Gateway, caller: &Principal, v: &Value, name: &str) -> RestResult {
    let Some(cfg) = v.get("config") else {
        return Err(RestError::BadRequest(
            "the body has no config: send {\"name\": ..., \"config\": {...}}".into(),
        ));
    };
    let config = full_config(cfg, name)?;
    let target = match v.get("initial_state") {
        None | Some(Value::Null) => TargetState::Started,
        Some(Value::String(s)) => match s.to_ascii_uppercase().as_str() {
            "RUNNING" => TargetState::Started,
            "PAUSED" => TargetState::Paused,
            "STOPPED" => TargetState::Stopped,
            _ => {
                return Err(RestError::BadRequest(format!(
                    "initial_state {s:?} is not RUNNING, PAUSED or STOPPED"
                )));
            }
        },
        Some(_) => {
            return Err(RestError::BadRequest(
                "initial_state must be a string".into(),
            ));
        }
    };
    let info = g.admin.create(name, &config, target, caller).await?;
    created(&info)
}

fn created(info: &pb::ConnectorInfo) -> RestResult {
    let mut r = (StatusCode::CREATED, axum::Json(json::connector_info(info))).into_response();
    let location = format!("/connectors/{}", encode_segment(&info.name));
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

/// Percent-encodes a path segment (names may hold spaces and other punctuation).
fn encode_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn connector(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    ok(json::connector_info(&g.admin.connector(&name)?))
}

async fn config(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    let info = g.admin.connector(&name)?;
    ok(json!(json::config(&info.name, &info.config)))
}

/// `PUT /connectors/{name}/config`: 201 created, 200 replaced.
async fn put_config(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    axum::Extension(caller): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> RestResult {
    let name = path_part(p)?;
    let v = json_body(&headers, body).await?;
    let config = full_config(&v, &name)?;
    let (info, was_created) = g.admin.put_config(&name, &config, &caller).await?;
    if was_created {
        created(&info)
    } else {
        ok(json::connector_info(&info))
    }
}

/// `PATCH /connectors/{name}/config` (KIP-477): `null` removes a key.
async fn patch_config(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    axum::Extension(caller): axum::Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> RestResult {
    let name = path_part(p)?;
    let v = json_body(&headers, body).await?;
    let mut patch = config_map(&v, "config")?;
    if let Some(given) = patch.remove(json::NAME_KEY)
        && let Some(e) = name_mismatch(given.as_deref(), &name)
    {
        return Err(e);
    }
    ok(json::connector_info(
        &g.admin.patch_config(&name, &patch, &caller).await?,
    ))
}

async fn status(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    ok(json::connector_status(&g.admin.status(&name)?))
}

async fn tasks(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    ok(json::task_configs(&g.admin.connector(&name)?))
}

fn task_number(s: &str) -> Result<u32, RestError> {
    s.parse::<u32>().map_err(|_| {
        RestError::BadRequest(format!("task id {s:?} is not a task number (0, 1, ...)"))
    })
}

async fn task_status(
    State(g): State<Gateway>,
    p: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let Path((name, task)) = p.map_err(|e| RestError::BadRequest(format!("bad path: {e}")))?;
    let task = task_number(&task)?;
    let s = g.admin.status(&name)?;
    let Some(t) = s.tasks.iter().find(|t| t.task == task) else {
        return Err(crate::admin::ApiError::TaskNotFound { name, task }.into());
    };
    ok(json::task_state(t))
}

async fn restart_task(
    State(g): State<Gateway>,
    p: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let Path((name, task)) = p.map_err(|e| RestError::BadRequest(format!("bad path: {e}")))?;
    g.admin
        .restart(&name, RestartScope::Task(task_number(&task)?))?;
    empty(StatusCode::NO_CONTENT)
}

async fn pause(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    g.admin.set_target(&path_part(p)?, TargetState::Paused)?;
    empty(StatusCode::ACCEPTED)
}

async fn resume(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    g.admin.set_target(&path_part(p)?, TargetState::Started)?;
    empty(StatusCode::ACCEPTED)
}

/// KIP-875: 204.
async fn stop(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    g.admin.set_target(&path_part(p)?, TargetState::Stopped)?;
    empty(StatusCode::NO_CONTENT)
}

/// KIP-745: without flags the connector instance only, 204; with `includeTasks` or
/// `onlyFailed`, 202 with the status (the chosen instances RESTARTING).
async fn restart(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    q: RawQuery,
) -> RestResult {
    let name = path_part(p)?;
    let pairs = query_pairs(&q)?;
    let include_tasks = flag(&pairs, "includeTasks")?;
    let only_failed = flag(&pairs, "onlyFailed")?;
    let s = g.admin.restart(
        &name,
        RestartScope::Connector {
            include_tasks,
            only_failed,
        },
    )?;
    if include_tasks || only_failed {
        with_status(StatusCode::ACCEPTED, json::connector_status(&s))
    } else {
        empty(StatusCode::NO_CONTENT)
    }
}

/// `DELETE /connectors/{name}`: 204 once the deletion is recorded, as Kafka Connect
/// answers once its tombstone is written; the connector then shows DELETING (with its
/// cleanup steps) until the cleanup ends, then 404. Extensions: `keepResources`,
/// `force`, `wait` (204 only once gone; 504 when not gone within `waitTimeoutMs`).
async fn delete(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    q: RawQuery,
) -> RestResult {
    let name = path_part(p)?;
    let opts = delete_options(&query_pairs(&q)?)?;
    let answer = g.admin.delete(&name, opts).await?;
    // Connect's DELETE has no body; what a force or give-up skipped goes in a header.
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Some(skipped) = cleanup_skipped(&answer).and_then(|v| HeaderValue::from_str(&v).ok()) {
        response
            .headers_mut()
            .insert(CLEANUP_SKIPPED_HEADER, skipped);
    }
    Ok(response)
}

/// Header of a `DELETE` answer naming the cleanup that was not done: what a force skipped
/// and what `cleanup.policy = give-up` gave up (external resources of those units may
/// remain), for example `forced: task 0, connector` or `given up: task 1`.
pub const CLEANUP_SKIPPED_HEADER: &str = "wharf-cleanup-skipped";

/// The [`CLEANUP_SKIPPED_HEADER`] value of a deletion's answer, `None` when nothing was
/// skipped. Pure.
fn cleanup_skipped(answer: &pb::DeleteConnectorResponse) -> Option<String> {
    use crate::reconcile::finalizer::unit_list;
    let forced = unit_list(&answer.skipped_tasks, answer.connector_cleanup_skipped);
    let given_up = unit_list(&answer.given_up_tasks, answer.connector_cleanup_given_up);
    let parts: Vec<String> = [("forced", forced), ("given up", given_up)]
        .into_iter()
        .filter(|(_, units)| !units.is_empty())
        .map(|(how, units)| format!("{how}: {units}"))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The [`DeleteOptions`] of a `DELETE /connectors/{name}` query's pairs: `force`,
/// `keepResources` and `wait` are booleans ([`flag`]); `waitTimeoutMs` is the wait bound
/// in milliseconds (a `u32`; absent: 0, the default bound) and only taken with
/// `wait=true`. Pure.
///
/// # Errors
/// A 400 naming the parameter: a boolean that is not `true`/`false`, a `waitTimeoutMs`
/// that is not a number, or one without `wait=true` (the delete would not wait, so the
/// caller asked for something else than what would run).
fn delete_options(pairs: &[(String, String)]) -> Result<DeleteOptions, RestError> {
    let wait = flag(pairs, "wait")?;
    let timeout = pairs.iter().rev().find(|(k, _)| k == "waitTimeoutMs");
    let wait_timeout_ms = match (timeout, wait) {
        (None, _) => 0,
        (Some((_, v)), false) => {
            return Err(RestError::BadRequest(format!(
                "waitTimeoutMs={v:?} needs wait=true: without it the delete does not wait; add wait=true or leave waitTimeoutMs out"
            )));
        }
        (Some((_, v)), true) => v.parse::<u32>().map_err(|_| {
            RestError::BadRequest(format!(
                "waitTimeoutMs={v:?} is not a number of milliseconds"
            ))
        })?,
    };
    Ok(DeleteOptions {
        force: flag(pairs, "force")?,
        wait,
        wait_timeout_ms,
        mode: DeletionMode::keeping_resources(flag(pairs, "keepResources")?),
    })
}

/// Extension: runs failed cleanup steps now; 202 with the status, 204 when the deletion
/// finished meanwhile.
async fn retry_cleanup(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    match g.admin.retry_cleanup(&path_part(p)?)? {
        Some(s) => with_status(StatusCode::ACCEPTED, json::connector_status(&s)),
        None => empty(StatusCode::NO_CONTENT),
    }
}

async fn offsets(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    ok(json::offsets(&g.admin.offsets(&path_part(p)?)?))
}

/// KIP-875 `PATCH /connectors/{name}/offsets` `{"offsets": [{"partition", "offset"}]}`;
/// a `null` offset removes the partition's offset.
async fn alter_offsets(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> RestResult {
    let name = path_part(p)?;
    let v = json_body(&headers, body).await?;
    if let Some(e) = unknown_field(&v, "the body", ALTER_OFFSETS_FIELDS) {
        return Err(e);
    }
    let Some(Value::Array(list)) = v.get("offsets") else {
        return Err(RestError::BadRequest(
            "the body must be {\"offsets\": [{\"partition\": {...}, \"offset\": {...}}]}".into(),
        ));
    };
    for (i, o) in list.iter().enumerate() {
        if let Some(e) = unknown_field(o, &format!("offsets[{i}]"), OFFSET_ENTRY_FIELDS) {
            return Err(e);
        }
    }
    let offsets = list
        .iter()
        .map(|o| pb::SourceOffset {
            partition: o.get("partition").map(Value::to_string).unwrap_or_default(),
            offset: match o.get("offset") {
                None | Some(Value::Null) => String::new(),
                Some(v) => v.to_string(),
            },
        })
        .collect();
    g.admin.alter_offsets(&name, offsets)?;
    ok(json!({ "message": "The offsets for this connector have been altered successfully" }))
}

async fn reset_offsets(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    g.admin.reset_offsets(&path_part(p)?)?;
    ok(json!({ "message": "The offsets for this connector have been reset successfully" }))
}

/// `GET /connector-plugins`: Wharf's plugins are all connectors, so `connectorsOnly`
/// changes nothing (accepted and checked).
async fn plugins(State(g): State<Gateway>, q: RawQuery) -> RestResult {
    flag(&query_pairs(&q)?, "connectorsOnly")?;
    ok(json!(
        g.admin
            .plugin_list()?
            .iter()
            .map(json::plugin)
            .collect::<Vec<_>>()
    ))
}

async fn plugin_config(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let class = path_part(p)?;
    let keys = g.admin.plugin_config(&class)?;
    ok(json!(
        keys.iter()
            .enumerate()
            .map(|(i, k)| json::config_key(k, i))
            .collect::<Vec<_>>()
    ))
}

/// `PUT /connector-plugins/{class}/config/validate`: 200 with per-key errors; the body's
/// `connector.class` is set from the path when missing and must match it when given.
async fn validate(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> RestResult {
    let class = path_part(p)?;
    let v = json_body(&headers, body).await?;
    let mut config = HashMap::new();
    for (k, val) in config_map(&v, "config")? {
        if k == json::NAME_KEY {
            continue;
        }
        config.insert(k, val.unwrap_or_default());
    }
    match config.get(crate::model::CONNECTOR_CLASS) {
        None => {
            config.insert(crate::model::CONNECTOR_CLASS.to_owned(), class);
        }
        Some(given) if *given == class => {}
        Some(given) => {
            return Err(RestError::BadRequest(format!(
                "connector.class {:?} in the body does not match the plugin {:?} in the path",
                bounded_name(given),
                bounded_name(&class)
            )));
        }
    }
    ok(json::validation(&g.admin.validate(&config).await?))
}

async fn all_loggers(State(g): State<Gateway>) -> RestResult {
    ok(g.loggers.all())
}

async fn logger(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    match g.loggers.get(&name) {
        Some(v) => ok(v),
        None => Err(RestError::Api(crate::admin::ApiError::InvalidArgument {
            field: "logger".into(),
            reason: format!(
                "logger {name:?} has no level set; GET /admin/loggers lists those that do"
            ),
        })),
    }
}

/// `PUT /admin/loggers/{logger}` `{"level": "DEBUG"}`: 200 with the loggers changed.
async fn set_logger(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    q: RawQuery,
    headers: HeaderMap,
    body: Body,
) -> RestResult {
    let name = path_part(p)?;
    let pairs = query_pairs(&q)?;
    if let Some((_, scope)) = pairs.iter().rev().find(|(k, _)| k == "scope")
        && !scope.eq_ignore_ascii_case("worker")
        && !scope.eq_ignore_ascii_case("cluster")
    {
        return Err(RestError::BadRequest(format!(
            "scope={scope:?}: scope is worker or cluster"
        )));
    }
    let v = json_body(&headers, body).await?;
    if let Some(e) = unknown_field(&v, "the body", SET_LOGGER_FIELDS) {
        return Err(e);
    }
    let Some(Value::String(level)) = v.get("level") else {
        return Err(RestError::BadRequest(
            "the body must be {\"level\": \"DEBUG\"}".into(),
        ));
    };
    let changed = g.loggers.set(&name, level)?;
    ok(json!(changed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn a_delete_that_skipped_nothing_has_no_skipped_header() {
        assert_eq!(
            cleanup_skipped(&pb::DeleteConnectorResponse::default()),
            None
        );
    }

    #[test]
    fn the_skipped_header_names_what_a_force_and_give_up_left() {
        let forced = pb::DeleteConnectorResponse {
            skipped_tasks: vec![0, 2],
            connector_cleanup_skipped: true,
            ..Default::default()
        };
        assert_eq!(
            cleanup_skipped(&forced).as_deref(),
            Some("forced: task 0, task 2, connector")
        );
        let given_up = pb::DeleteConnectorResponse {
            given_up_tasks: vec![1],
            ..Default::default()
        };
        assert_eq!(
            cleanup_skipped(&given_up).as_deref(),
            Some("given up: task 1")
        );
        let both = pb::DeleteConnectorResponse {
            skipped_tasks: vec![0],
            connector_cleanup_given_up: true,
            ..Default::default()
        };
        assert_eq!(
            cleanup_skipped(&both).as_deref(),
            Some("forced: task 0; given up: connector")
        );
    }

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

    fn delete_query(q: &str) -> Result<DeleteOptions, RestError> {
        delete_options(&query_pairs(&RawQuery(Some(q.to_owned()))).unwrap())
    }

    #[test]
    fn a_delete_query_without_parameters_deletes_without_waiting() {
        let o = delete_query("").unwrap();
        assert!(!o.force && !o.wait && o.mode == DeletionMode::Cleanup && o.wait_timeout_ms == 0);
    }

    #[test]
    fn a_delete_query_takes_its_modes_and_a_wait_bound_with_wait() {
        let o = delete_query("force=true&keepResources=true&wait=true&waitTimeoutMs=5").unwrap();
        assert!(o.force && o.mode == DeletionMode::KeepResources && o.wait);
        assert_eq!(o.wait_timeout_ms, 5);
        let o = delete_query("wait=true").unwrap();
        assert!(o.wait && o.wait_timeout_ms == 0);
    }

    #[test]
    fn a_wait_bound_without_wait_true_is_refused_naming_both() {
        for q in [
            "waitTimeoutMs=5",
            "wait=false&waitTimeoutMs=5",
            "waitTimeoutMs=5&wait=FALSE",
        ] {
            let e = delete_query(q).expect_err(q).to_string();
            assert!(
                e.contains("waitTimeoutMs=\"5\" needs wait=true"),
                "{q}: {e}"
            );
        }
    }

    #[test]
    fn a_wait_bound_that_is_not_a_number_is_refused_naming_it() {
        for v in ["-1", "5s", "", "4294967296"] {
            let e = delete_query(&format!("wait=true&waitTimeoutMs={v}"))
                .expect_err(v)
                .to_string();
            assert!(e.contains("is not a number of milliseconds"), "{v}: {e}");
        }
    }

    #[test]
    fn boolean_query_parameters_are_strict() {
        let q = |s: &str| query_pairs(&RawQuery(Some(s.to_owned()))).unwrap();
        assert!(flag(&q("includeTasks=true"), "includeTasks").unwrap());
        assert!(flag(&q("includeTasks=TRUE"), "includeTasks").unwrap());
        assert!(!flag(&q("includeTasks=false"), "includeTasks").unwrap());
        assert!(!flag(&q(""), "includeTasks").unwrap());
        assert!(flag(&q("includeTasks=yes"), "includeTasks").is_err());
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

    #[test]
    fn config_values_take_strings_numbers_and_booleans_and_the_name_must_match() {
        let c = full_config(
            &json!({"tasks.max": 2, "a": true, "b": "x", "name": "c"}),
            "c",
        )
        .unwrap();
        assert_eq!(c["tasks.max"], "2");
        assert_eq!(c["a"], "true");
        assert!(!c.contains_key("name"));
        assert!(full_config(&json!({"name": "other"}), "c").is_err());
        assert!(full_config(&json!({"a": [1]}), "c").is_err());
        assert!(full_config(&json!({"a": null}), "c").is_err());
    }

    #[test]
    fn a_matching_name_is_no_mismatch() {
        assert!(name_mismatch(Some("w2"), "w2").is_none());
    }

    #[test]
    fn a_different_name_is_refused_naming_both_as_json_strings() {
        let e = name_mismatch(Some("other"), "w2").expect("refused");
        assert_eq!(
            e.to_string(),
            "config[name] is \"other\", which does not match the connector name \"w2\" in the path: leave it out or make them equal"
        );
        assert!(!e.to_string().contains("Some("), "{e}");
    }

    #[test]
    fn a_null_name_is_refused_as_null() {
        let e = name_mismatch(None, "w2").expect("refused").to_string();
        assert!(e.starts_with("config[name] is null, which"), "{e}");
    }

    #[test]
    fn put_refuses_a_different_name_with_the_same_text_as_patch() {
        let Err(put) = full_config(&json!({"name": "other"}), "w2") else {
            panic!("a mismatched name is refused");
        };
        assert_eq!(
            put.to_string(),
            name_mismatch(Some("other"), "w2").unwrap().to_string()
        );
    }

    #[test]
    fn a_mismatched_name_is_quoted_cut_in_the_refusal() {
        let huge = "z".repeat(1_000_000);
        let other = format!("{huge}y");
        let Err(RestError::BadRequest(m)) = full_config(&json!({ "name": other }), &huge) else {
            panic!("a mismatched name is refused");
        };
        assert!(m.len() < 1_000, "{} bytes", m.len());
        assert!(m.contains("[cut, 1000001 bytes]"), "{m}");
        assert!(m.contains("[cut, 1000000 bytes]"), "{m}");
    }

    #[test]
    fn a_create_body_with_an_unknown_field_is_refused_naming_it_and_the_known_ones() {
        let body = json!({ "name": "c", "config": {}, "initialState": "PAUSED" });
        let e = unknown_field(&body, "the body", CREATE_FIELDS).expect("refused");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            e.to_string(),
            "unknown field \"initialState\" in the body: the fields are name, config, initial_state; did you mean \"initial_state\"?"
        );
    }

    #[test]
    fn case_and_separator_variants_of_a_field_are_suggested() {
        for variant in ["INITIAL_STATE", "initial-state", "InitialState"] {
            let body = json!({ variant: "PAUSED" });
            let text = unknown_field(&body, "the body", CREATE_FIELDS)
                .expect("refused")
                .to_string();
            assert!(text.contains("did you mean \"initial_state\""), "{text}");
        }
    }

    #[test]
    fn an_unknown_field_like_no_known_one_gets_no_suggestion() {
        let body = json!({ "name": "c", "tasks": 3 });
        let text = unknown_field(&body, "the body", CREATE_FIELDS)
            .expect("refused")
            .to_string();
        assert!(
            text.contains("\"tasks\"") && !text.contains("did you mean"),
            "{text}"
        );
    }

    #[test]
    fn known_fields_only_or_a_body_that_is_no_object_pass_the_field_check() {
        let full =
            json!({ "name": "c", "config": { "anything.goes": "1" }, "initial_state": "PAUSED" });
        assert!(unknown_field(&full, "the body", CREATE_FIELDS).is_none());
        assert!(unknown_field(&json!([1]), "the body", CREATE_FIELDS).is_none());
        let entry = json!({ "partition": {}, "offset": null, "offest": 1 });
        let text = unknown_field(&entry, "offsets[0]", OFFSET_ENTRY_FIELDS)
            .expect("refused")
            .to_string();
        assert!(text.contains("\"offest\" in offsets[0]"), "{text}");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_413() {
        let body = Body::from(vec![b'x'; MAX_BODY_BYTES + 1]);
        let err = axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .expect_err("over the limit");
        let refusal = body_read_refusal(&err);
        assert_eq!(refusal.status(), StatusCode::PAYLOAD_TOO_LARGE, "{refusal}");
    }

    #[tokio::test]
    async fn a_body_cut_short_is_400_not_413() {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"{\"name\":")),
            Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "end of file before message length reached",
            )),
        ];
        let body = Body::from_stream(futures::stream::iter(chunks));
        let err = axum::body::to_bytes(body, MAX_BODY_BYTES)
            .await
            .expect_err("cut short");
        let refusal = body_read_refusal(&err);
        assert_eq!(refusal.status(), StatusCode::BAD_REQUEST, "{refusal}");
        assert!(
            refusal
                .to_string()
                .contains("end of file before message length reached"),
            "{refusal}"
        );
    }

    #[tokio::test]
    async fn a_body_that_stalls_is_a_408_and_a_whole_one_is_read() {
        use futures::StreamExt as _;
        let stalled =
            futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"{\"na"))])
                .chain(futures::stream::pending());
        let timeout = std::time::Duration::from_millis(100);
        let e = json_body_within(&HeaderMap::new(), Body::from_stream(stalled), timeout)
            .await
            .expect_err("stalled");
        assert_eq!(e.status(), StatusCode::REQUEST_TIMEOUT, "{e}");
        let whole = Body::from(r#"{"name": "c"}"#);
        let v = json_body_within(&HeaderMap::new(), whole, timeout)
            .await
            .expect("read");
        assert_eq!(v["name"], "c");
    }

    #[test]
    fn names_are_percent_encoded_in_the_location_header() {
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(encode_segment("shop-audit.v1_x"), "shop-audit.v1_x");
    }
}
