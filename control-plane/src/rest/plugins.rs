//! The `/connector-plugins` routes: the plugins, their config definitions, validation.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use serde_json::json;

use super::error::RestError;
use super::json;
use super::request::*;
use super::{Gateway, RestResult};
use crate::auth::audit::bounded_name;

/// `GET /connector-plugins`: the connector plugins the executors offer; with
/// `connectorsOnly=false` (Connect's default is `true`) also the converters, transforms
/// and predicates every executor has built in, typed as Connect types them
/// (`converter`, `header_converter`, `transformation`, `predicate`), and the custom
/// transforms and predicates live executors registered.
pub(super) async fn plugins(State(g): State<Gateway>, q: RawQuery) -> RestResult {
    let pairs = query_pairs(&q)?;
    let given = pairs.iter().any(|(k, _)| k == "connectorsOnly");
    let connectors_only = !given || flag(&pairs, "connectorsOnly")?;
    let mut all: Vec<serde_json::Value> = g.admin.plugin_list()?.iter().map(json::plugin).collect();
    if !connectors_only {
        all.extend(json::builtin_pipeline_plugins());
        all.extend(g.admin.transform_list()?.iter().map(json::transform_plugin));
    }
    ok(json!(all))
}

pub(super) async fn plugin_config(
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
pub(super) async fn validate(
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
