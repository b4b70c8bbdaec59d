//! Reading requests and writing answers: path parts, strict query flags, bounded JSON
//! bodies, config maps and the field checks Kafka Connect's clients expect.

use std::collections::{BTreeMap, HashMap};

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use serde_json::Value;

use super::MAX_BODY_BYTES;
use super::RestResult;
use super::error::RestError;
use super::json;
use crate::auth::audit::bounded_name;

/// A path part, percent-decoded; a bad escape is a 400.
pub(super) fn path_part(
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<String, RestError> {
    p.map(|Path(s)| s)
        .map_err(|e| RestError::BadRequest(format!("bad path: {e}")))
}

/// The query's `key=value` pairs, in order (keys may repeat, as `expand` does).
pub(super) fn query_pairs(q: &RawQuery) -> Result<Vec<(String, String)>, RestError> {
    match &q.0 {
        None => Ok(Vec::new()),
        Some(q) => serde_urlencoded::from_str::<Vec<(String, String)>>(q)
            .map_err(|e| RestError::BadRequest(format!("bad query string: {e}"))),
    }
}

/// A boolean query parameter (`true` / `false`, any case; absent means `false`).
pub(super) fn flag(pairs: &[(String, String)], name: &str) -> Result<bool, RestError> {
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
pub(super) async fn drain(body: Body) {
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
pub(super) async fn json_body(headers: &HeaderMap, body: Body) -> Result<Value, RestError> {
    json_body_within(headers, body, BODY_READ_TIMEOUT).await
}

/// [`json_body`] with the body read bounded by `timeout`.
pub(super) async fn json_body_within(
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
/// message: "the body", `offsets[0]`) that is not one of `known`, suggesting the known
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
pub(super) fn body_read_refusal(err: &(dyn std::error::Error + 'static)) -> RestError {
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
pub(super) fn config_map(
    v: &Value,
    what: &str,
) -> Result<BTreeMap<String, Option<String>>, RestError> {
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
pub(super) fn name_mismatch(given: Option<&str>, name: &str) -> Option<RestError> {
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
pub(super) fn full_config(v: &Value, name: &str) -> Result<HashMap<String, String>, RestError> {
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

pub(super) fn ok(v: Value) -> RestResult {
    Ok((StatusCode::OK, axum::Json(v)).into_response())
}

pub(super) fn with_status(code: StatusCode, v: Value) -> RestResult {
    Ok((code, axum::Json(v)).into_response())
}

pub(super) fn empty(code: StatusCode) -> RestResult {
    Ok(code.into_response())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
}
