//! Wharf's resource-ledger routes (extensions, docs/rest.md): `GET
//! /connectors/{name}/resources`, `GET /resources/orphaned`, `POST
//! /resources/orphaned/adopt` and `POST /resources/orphaned/purge`.
//! /connectors/{name}/resources`, `GET /resources/orphaned` and `POST
//! /resources/orphaned/adopt`; and Kafka Connect's KIP-558 active-topic routes, `GET
//! /connectors/{name}/topics` and `PUT /connectors/{name}/topics/reset`.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::error::RestError;
use super::json;
use super::request::*;
use super::{Gateway, RestResult};

/// `GET /connectors/{name}/resources`: `{"name", "resources": [entry]}`.
pub(super) async fn resources(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    let entries = g.admin.resources(&name)?;
    ok(json!({
        "name": name,
        "resources": entries.iter().map(json::resource_entry).collect::<Vec<_>>(),
    }))
}

/// `GET /resources/orphaned`: `{"orphans": [orphan]}`, oldest first.
pub(super) async fn orphaned(State(g): State<Gateway>) -> RestResult {
    let orphans = g.admin.orphans()?;
    ok(json!({
        "orphans": orphans.iter().map(json::orphan).collect::<Vec<_>>(),
    }))
}

/// `POST /resources/orphaned/adopt` with `{"connector": NAME, "ids": [ID, ...]}`: the
/// adopting connector's ledger afterwards, as `GET /connectors/{name}/resources`.
pub(super) async fn adopt(State(g): State<Gateway>, headers: HeaderMap, body: Body) -> RestResult {
    let v = json_body(&headers, body).await?;
    let connector = match v.get("connector") {
        Some(Value::String(s)) => s.clone(),
        _ => {
            return Err(RestError::BadRequest(
                "the body needs \"connector\": the name of the connector that adopts the orphans"
                    .into(),
            ));
        }
    };
    let ids = orphan_ids(&v)?;
    let entries = g.admin.adopt_orphans(&ids, &connector)?;
    ok(json!({
        "name": connector,
        "resources": entries.iter().map(json::resource_entry).collect::<Vec<_>>(),
    }))
}

/// The `"ids"` of a body: the orphan ids from `GET /resources/orphaned`.
fn orphan_ids(v: &Value) -> Result<Vec<String>, RestError> {
    match v.get("ids") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                _ => Err(RestError::BadRequest("ids must be strings".into())),
            })
            .collect(),
        _ => Err(RestError::BadRequest(
            "the body needs \"ids\": the orphan ids from GET /resources/orphaned".into(),
        )),
    }
}

/// `POST /resources/orphaned/purge` with `{"ids": [ID, ...]}`: runs the cleanup of their
/// owners; answers `{"purged": [ID], "remaining": [orphan]}` (the orphans of those owners
/// still listed, each with its `purge_error`).
pub(super) async fn purge(State(g): State<Gateway>, headers: HeaderMap, body: Body) -> RestResult {
    let v = json_body(&headers, body).await?;
    let ids = orphan_ids(&v)?;
    let (purged, remaining) = g.admin.purge_orphans(&ids).await?;
    ok(json!({
        "purged": purged,
        "remaining": remaining.iter().map(json::orphan).collect::<Vec<_>>(),
    }))
}

/// `GET /connectors/{name}/topics` (KIP-558): `{"<name>": {"topics": [topic, ...]}}`, as
/// Kafka Connect answers it.
pub(super) async fn topics(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    let name = path_part(p)?;
    let topics = g.admin.topics(&name)?;
    let mut body = serde_json::Map::new();
    body.insert(name, json!({ "topics": topics }));
    ok(Value::Object(body))
}

/// `PUT /connectors/{name}/topics/reset` (KIP-558): 200 with an empty body, as Kafka
/// Connect answers it.
pub(super) async fn reset_topics(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    g.admin.reset_topics(&path_part(p)?).await?;
    empty(StatusCode::OK)
}
