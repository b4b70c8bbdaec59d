//! The `/` and `/health` routes and the `/connectors` route group: list, create, read,
//! configure, status, tasks, and the lifecycle (pause, resume, stop, restart).

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use wharf::pb::v1 as pb;

use super::error::RestError;
use super::json;
use super::request::*;
use super::{CLUSTER_ID, CONNECT_API_VERSION};
use super::{Gateway, RestPeer, RestResult};
use crate::admin::RestartScope;
use crate::auth::Principal;
use crate::model::TargetState;
use axum::extract::ConnectInfo;

/// `GET /`: versions, and `kafka_cluster_id`: the Kafka cluster's id when the record log
/// is Kafka (once an executor reported it), else [`CLUSTER_ID`].
pub(super) async fn root(State(g): State<Gateway>) -> RestResult {
    let cluster_id = g
        .admin
        .kafka_cluster_id()
        .unwrap_or_else(|| CLUSTER_ID.to_owned());
    ok(json!({
        "version": CONNECT_API_VERSION,
        "commit": concat!("wharf-", env!("CARGO_PKG_VERSION")),
        "kafka_cluster_id": cluster_id,
        "wharf_version": env!("CARGO_PKG_VERSION"),
    }))
}

/// KIP-1017: 200 healthy when the store answers, 500 unhealthy otherwise.
pub(super) async fn health(State(g): State<Gateway>) -> RestResult {
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
pub(super) async fn list(State(g): State<Gateway>, q: RawQuery) -> RestResult {
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
pub(super) struct BodyConnector(pub(super) String);

/// `POST /connectors` `{"name", "config", "initial_state"?}`: 201 with the connector.
/// The answer, success or refusal, carries the body's name for the audit trail
/// ([`BodyConnector`]) once the body has one.
pub(super) async fn create(
    State(g): State<Gateway>,
    axum::Extension(caller): axum::Extension<Principal>,
    uri: axum::http::Uri,
    peer: Result<ConnectInfo<RestPeer>, axum::extract::rejection::ExtensionRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let base = base_url(&uri, &headers, peer.as_ref().ok().map(|c| &c.0));
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
        None => create_named(&g, &caller, &v, &name, base.as_deref())
            .await
            .into_response(),
    };
    answer.extensions_mut().insert(BodyConnector(name));
    answer
}

/// The rest of [`create`], for the connector `name` the body `v` names.
pub(super) async fn create_named(
    g: &Gateway,
    caller: &Principal,
    v: &Value,
    name: &str,
    base: Option<&str>,
) -> RestResult {
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
    created(&info, base)
}

/// The base URL a client reached this gateway at (`http://host:port`), as Connect builds
/// its `Location` from the request's URI: the request's authority (HTTP/2) or `Host`
/// header (HTTP/1.1), `https` on a TLS connection. `None` without either.
pub(super) fn base_url(
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    peer: Option<&super::RestPeer>,
) -> Option<String> {
    let host = match uri.authority() {
        Some(a) => a.as_str().to_owned(),
        None => headers.get(header::HOST)?.to_str().ok()?.to_owned(),
    };
    if host.is_empty() || host.contains(['/', ' ', '@']) {
        return None;
    }
    let scheme = if peer.is_some_and(|p| p.0.tls) {
        "https"
    } else {
        "http"
    };
    Some(format!("{scheme}://{host}"))
}

/// 201 with the connector and `Location: <base>/connectors/<name>` (absolute, as Connect
/// sends it; relative when the request named no host).
pub(super) fn created(info: &pb::ConnectorInfo, base: Option<&str>) -> RestResult {
    let mut r = (StatusCode::CREATED, axum::Json(json::connector_info(info))).into_response();
    let location = format!(
        "{}/connectors/{}",
        base.unwrap_or(""),
        encode_segment(&info.name)
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

/// Percent-encodes a path segment (names may hold spaces and other punctuation).
pub(super) fn encode_segment(s: &str) -> String {
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

pub(super) async fn connector(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    ok(json::connector_info(&g.admin.connector(&name)?))
}

pub(super) async fn config(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    let info = g.admin.connector(&name)?;
    ok(json!(json::config(&info.name, &info.config)))
}

/// `PUT /connectors/{name}/config`: 201 created, 200 replaced.
pub(super) async fn put_config(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    axum::Extension(caller): axum::Extension<Principal>,
    uri: axum::http::Uri,
    peer: Result<ConnectInfo<RestPeer>, axum::extract::rejection::ExtensionRejection>,
    headers: HeaderMap,
    body: Body,
) -> RestResult {
    let name = path_part(p)?;
    let base = base_url(&uri, &headers, peer.as_ref().ok().map(|c| &c.0));
    let v = json_body(&headers, body).await?;
    let config = full_config(&v, &name)?;
    let (info, was_created) = g.admin.put_config(&name, &config, &caller).await?;
    if was_created {
        created(&info, base.as_deref())
    } else {
        ok(json::connector_info(&info))
    }
}

/// `PATCH /connectors/{name}/config` (KIP-477): `null` removes a key.
pub(super) async fn patch_config(
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

pub(super) async fn status(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    ok(json::connector_status(&g.admin.status(&name)?))
}

pub(super) async fn tasks(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    ok(json::task_configs(&g.admin.connector(&name)?))
}

pub(super) fn task_number(s: &str) -> Result<u32, RestError> {
    s.parse::<u32>().map_err(|_| {
        RestError::BadRequest(format!("task id {s:?} is not a task number (0, 1, ...)"))
    })
}

pub(super) async fn task_status(
    State(g): State<Gateway>,
    p: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let Path((name, task)) = p.map_err(|e| RestError::BadRequest(format!("bad path: {e}")))?;
    let task = task_number(&task)?;
    let s = g.admin.status(&name)?;
    let shown = json::shows_tasks(s.target_state, s.deletion.is_some());
    let Some(t) = s.tasks.iter().find(|t| t.task == task && shown) else {
        return Err(crate::admin::ApiError::TaskNotFound { name, task }.into());
    };
    ok(json::task_state(t))
}

pub(super) async fn restart_task(
    State(g): State<Gateway>,
    p: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let Path((name, task)) = p.map_err(|e| RestError::BadRequest(format!("bad path: {e}")))?;
    let task = task_number(&task)?;
    // A STOPPED connector has no tasks (KIP-875), as GET shows: 404 as Connect answers.
    let s = g.admin.status(&name)?;
    if !json::shows_tasks(s.target_state, s.deletion.is_some()) {
        return Err(crate::admin::ApiError::TaskNotFound { name, task }.into());
    }
    g.admin.restart(&name, RestartScope::Task(task))?;
    empty(StatusCode::NO_CONTENT)
}

pub(super) async fn pause(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    g.admin.set_target(&path_part(p)?, TargetState::Paused)?;
    empty(StatusCode::ACCEPTED)
}

pub(super) async fn resume(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    g.admin.set_target(&path_part(p)?, TargetState::Started)?;
    empty(StatusCode::ACCEPTED)
}

/// KIP-875: 204.
pub(super) async fn stop(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    g.admin.set_target(&path_part(p)?, TargetState::Stopped)?;
    empty(StatusCode::NO_CONTENT)
}

/// KIP-745: without flags the connector instance only, 204; with `includeTasks` or
/// `onlyFailed`, 202 with the status (the chosen instances RESTARTING).
pub(super) async fn restart(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    q: RawQuery,
) -> RestResult {
    let name = path_part(p)?;
    let pairs = query_pairs(&q)?;
    let include_tasks = flag(&pairs, "includeTasks")?;
    let only_failed = flag(&pairs, "onlyFailed")?;
    // Connect answers a restart of a STOPPED connector as done and restarts nothing: it
    // stays STOPPED until resumed (gRPC's RestartConnector refuses it instead).
    let current = g.admin.status(&name)?;
    if current.target_state == pb::TargetState::Stopped as i32 && current.deletion.is_none() {
        return if include_tasks || only_failed {
            with_status(StatusCode::ACCEPTED, json::connector_status(&current))
        } else {
            empty(StatusCode::NO_CONTENT)
        };
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_percent_encoded_in_the_location_header() {
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(encode_segment("shop-audit.v1_x"), "shop-audit.v1_x");
    }
}
