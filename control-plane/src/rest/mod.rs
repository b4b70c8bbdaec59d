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
use crate::admin::{Admin, DeleteOptions, RestartScope};
use crate::model::TargetState;

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
    loggers: Arc<Loggers>,
}

type RestResult = Result<Response, RestError>;

impl Gateway {
    /// A gateway over `admin`; `loggers` changes log levels at run time.
    pub fn new(admin: Admin, loggers: Arc<Loggers>) -> Self {
        Self { admin, loggers }
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
            .route_layer(axum::middleware::from_fn(admit))
            .with_state(self)
    }
}

/// The gRPC method a REST route is served as (the admin action it performs): the name
/// that tracing shows and that authorization decides on, so that a REST caller is
/// allowed exactly what the same caller is allowed over gRPC. `None` for the routes
/// with no gRPC counterpart (`/`, `/health`, `/admin/loggers`).
pub fn grpc_method(method: &axum::http::Method, route: &str) -> Option<&'static str> {
    use axum::http::Method;
    let m = match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => return None,
    };
    Some(match (m, route) {
        ("GET", "/connectors") => "ListConnectors",
        ("POST", "/connectors") => "CreateConnector",
        (
            "GET",
            "/connectors/{name}" | "/connectors/{name}/config" | "/connectors/{name}/tasks",
        ) => "GetConnector",
        ("DELETE", "/connectors/{name}") => "DeleteConnector",
        ("PUT" | "PATCH", "/connectors/{name}/config") => "PutConnectorConfig",
        ("GET", "/connectors/{name}/status" | "/connectors/{name}/tasks/{task}/status") => {
            "GetConnectorStatus"
        }
        ("POST", "/connectors/{name}/tasks/{task}/restart") => "RestartTask",
        ("PUT", "/connectors/{name}/pause") => "PauseConnector",
        ("PUT", "/connectors/{name}/resume") => "ResumeConnector",
        ("PUT", "/connectors/{name}/stop") => "StopConnector",
        ("POST", "/connectors/{name}/restart") => "RestartConnector",
        ("POST", "/connectors/{name}/cleanup/retry") => "RetryCleanup",
        ("GET", "/connectors/{name}/offsets") => "GetOffsets",
        ("PATCH", "/connectors/{name}/offsets") => "AlterOffsets",
        ("DELETE", "/connectors/{name}/offsets") => "ResetOffsets",
        ("GET", "/connector-plugins" | "/connector-plugins/{class}/config") => {
            "ListConnectorPlugins"
        }
        ("PUT", "/connector-plugins/{class}/config/validate") => "ValidateConnectorConfig",
        _ => return None,
    })
}

/// In front of every route: names the request after its gRPC method (one span per
/// request, as the gRPC server's `rpc` span).
///
/// SEAM(authz, issue 14): admin authentication and roles (`control-plane/src/auth/`) had
/// not landed when this was written. Here the request's `HeaderMap` (bearer token) and
/// peer identity go to the same authenticate/authorize functions as the gRPC service,
/// with [`grpc_method`] as the action; a refusal returns [`RestError::Unauthenticated`]
/// (401) or [`RestError::Forbidden`] (403) where gRPC answers UNAUTHENTICATED or
/// PERMISSION_DENIED. Until then the gateway is as open as the gRPC API without auth.
async fn admit(
    route: axum::extract::MatchedPath,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use tracing::Instrument;
    let rpc = grpc_method(req.method(), route.as_str()).unwrap_or("-");
    let span = tracing::info_span!("rest", method = %req.method(), route = %route.as_str(), rpc);
    next.run(req).instrument(span).await
}

/// Serves `router` on `listener` (HTTP/1.1) until `shutdown` resolves.
///
/// # Errors
/// When accepting connections fails.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "Kafka Connect REST gateway listening");
    }
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

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

/// Reads a JSON body: `application/json` (or no content type), at most
/// [`MAX_BODY_BYTES`], well-formed.
async fn json_body(headers: &HeaderMap, body: Body) -> Result<Value, RestError> {
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
        return Err(RestError::PayloadTooLarge(MAX_BODY_BYTES));
    }
    let bytes: Bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| RestError::PayloadTooLarge(MAX_BODY_BYTES))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| RestError::BadRequest(format!("request body is not valid JSON: {e}")))
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
            if val != name {
                return Err(RestError::BadRequest(format!(
                    "connector name in the config ({val:?}) does not match the connector name {name:?}"
                )));
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
    let all = g.admin.list(with_status)?;
    if !with_status && !with_info {
        return ok(json!(
            all.iter().map(|(i, _)| i.name.clone()).collect::<Vec<_>>()
        ));
    }
    let mut out = serde_json::Map::new();
    for (info, status) in all {
        let mut entry = serde_json::Map::new();
        if with_info {
            entry.insert("info".into(), json::connector_info(&info));
        }
        if let Some(s) = status {
            entry.insert("status".into(), json::connector_status(&s));
        }
        out.insert(info.name, Value::Object(entry));
    }
    ok(Value::Object(out))
}

/// `POST /connectors` `{"name", "config", "initial_state"?}`: 201 with the connector.
async fn create(State(g): State<Gateway>, headers: HeaderMap, body: Body) -> RestResult {
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
    let Some(cfg) = v.get("config") else {
        return Err(RestError::BadRequest(
            "the body has no config: send {\"name\": ..., \"config\": {...}}".into(),
        ));
    };
    let config = full_config(cfg, &name)?;
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
    let info = g.admin.create(&name, &config, target)?;
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
    headers: HeaderMap,
    body: Body,
) -> RestResult {
    let name = path_part(p)?;
    let v = json_body(&headers, body).await?;
    let config = full_config(&v, &name)?;
    let (info, was_created) = g.admin.put_config(&name, &config)?;
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
    headers: HeaderMap,
    body: Body,
) -> RestResult {
    let name = path_part(p)?;
    let v = json_body(&headers, body).await?;
    let mut patch = config_map(&v, "config")?;
    if let Some(given) = patch.remove(json::NAME_KEY)
        && given.as_deref() != Some(name.as_str())
    {
        return Err(RestError::BadRequest(format!(
            "connector name in the config ({given:?}) does not match the connector name {name:?}"
        )));
    }
    ok(json::connector_info(&g.admin.patch_config(&name, &patch)?))
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
    let pairs = query_pairs(&q)?;
    let wait_timeout_ms = match pairs.iter().rev().find(|(k, _)| k == "waitTimeoutMs") {
        None => 0,
        Some((_, v)) => v.parse::<u32>().map_err(|_| {
            RestError::BadRequest(format!(
                "waitTimeoutMs={v:?} is not a number of milliseconds"
            ))
        })?,
    };
    let opts = DeleteOptions {
        force: flag(&pairs, "force")?,
        wait: flag(&pairs, "wait")?,
        wait_timeout_ms,
        keep_resources: flag(&pairs, "keepResources")?,
    };
    g.admin.delete(&name, opts).await?;
    empty(StatusCode::NO_CONTENT)
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
    let Some(Value::Array(list)) = v.get("offsets") else {
        return Err(RestError::BadRequest(
            "the body must be {\"offsets\": [{\"partition\": {...}, \"offset\": {...}}]}".into(),
        ));
    };
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
                "connector.class {given:?} in the body does not match the plugin {class:?} in the path"
            )));
        }
    }
    ok(json::validation(&g.admin.validate(&config)?))
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
    fn every_connector_route_names_its_grpc_method() {
        let cases = [
            (Method::GET, "/connectors", "ListConnectors"),
            (Method::POST, "/connectors", "CreateConnector"),
            (Method::GET, "/connectors/{name}", "GetConnector"),
            (Method::GET, "/connectors/{name}/config", "GetConnector"),
            (Method::GET, "/connectors/{name}/tasks", "GetConnector"),
            (Method::DELETE, "/connectors/{name}", "DeleteConnector"),
            (
                Method::PUT,
                "/connectors/{name}/config",
                "PutConnectorConfig",
            ),
            (
                Method::PATCH,
                "/connectors/{name}/config",
                "PutConnectorConfig",
            ),
            (
                Method::GET,
                "/connectors/{name}/status",
                "GetConnectorStatus",
            ),
            (
                Method::GET,
                "/connectors/{name}/tasks/{task}/status",
                "GetConnectorStatus",
            ),
            (
                Method::POST,
                "/connectors/{name}/tasks/{task}/restart",
                "RestartTask",
            ),
            (Method::PUT, "/connectors/{name}/pause", "PauseConnector"),
            (Method::PUT, "/connectors/{name}/resume", "ResumeConnector"),
            (Method::PUT, "/connectors/{name}/stop", "StopConnector"),
            (
                Method::POST,
                "/connectors/{name}/restart",
                "RestartConnector",
            ),
            (
                Method::POST,
                "/connectors/{name}/cleanup/retry",
                "RetryCleanup",
            ),
            (Method::GET, "/connectors/{name}/offsets", "GetOffsets"),
            (Method::PATCH, "/connectors/{name}/offsets", "AlterOffsets"),
            (Method::DELETE, "/connectors/{name}/offsets", "ResetOffsets"),
            (Method::GET, "/connector-plugins", "ListConnectorPlugins"),
            (
                Method::GET,
                "/connector-plugins/{class}/config",
                "ListConnectorPlugins",
            ),
            (
                Method::PUT,
                "/connector-plugins/{class}/config/validate",
                "ValidateConnectorConfig",
            ),
        ];
        for (m, route, rpc) in cases {
            assert_eq!(grpc_method(&m, route), Some(rpc), "{m} {route}");
        }
        assert_eq!(grpc_method(&Method::GET, "/"), None);
        assert_eq!(grpc_method(&Method::PUT, "/admin/loggers/{logger}"), None);
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
    fn names_are_percent_encoded_in_the_location_header() {
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(encode_segment("shop-audit.v1_x"), "shop-audit.v1_x");
    }
}
