//! The `/connectors/{name}/offsets` routes: read, alter and reset a connector's offsets.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde_json::{Value, json};
use wharf::pb::v1 as pb;

use super::error::RestError;
use super::json;
use super::request::*;
use super::{Gateway, RestResult};

pub(super) async fn offsets(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    ok(json::offsets(&g.admin.offsets(&path_part(p)?).await?))
}

/// KIP-875 `PATCH /connectors/{name}/offsets` `{"offsets": [{"partition", "offset"}]}`;
/// a `null` offset removes the partition's offset.
pub(super) async fn alter_offsets(
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
    g.admin.alter_offsets(&name, offsets).await?;
    ok(json!({ "message": "The offsets for this connector have been altered successfully" }))
}

pub(super) async fn reset_offsets(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    g.admin.reset_offsets(&path_part(p)?).await?;
    ok(json!({ "message": "The offsets for this connector have been reset successfully" }))
}
