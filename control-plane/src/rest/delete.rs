//! `DELETE /connectors/{name}` and `POST /connectors/{name}/cleanup/retry`: the deletion
//! modes and wait bound of the query, and the header that names skipped cleanup.

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::IntoResponse;
use wharf::pb::v1 as pb;

use super::error::RestError;
use super::json;
use super::request::*;
use super::{Gateway, RestResult};
use crate::admin::DeleteOptions;
use crate::model::DeletionMode;

/// `DELETE /connectors/{name}`: 204 once the deletion is recorded, as Kafka Connect
/// answers once its tombstone is written; the connector then shows DELETING (with its
/// cleanup steps) until the cleanup ends, then 404. Extensions: `keepResources`,
/// `force`, `wait` (204 only once gone; 504 when not gone within `waitTimeoutMs`).
pub(super) async fn delete(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
    q: RawQuery,
) -> RestResult {
    let name = path_part(p)?;
    let opts = delete_options(&query_pairs(&q)?)?;
    let answer = g.admin.delete(&name, opts).await?;
    if let Some(plan) = &answer.plan {
        // Extension: `dryRun=true` answers the plan (200) and changes nothing.
        return with_status(StatusCode::OK, json::deletion_plan(plan));
    }
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
pub(super) fn cleanup_skipped(answer: &pb::DeleteConnectorResponse) -> Option<String> {
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
pub(super) fn delete_options(pairs: &[(String, String)]) -> Result<DeleteOptions, RestError> {
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
        dry_run: flag(pairs, "dryRun")?,
    })
}

/// Extension: runs failed cleanup steps now; 202 with the status, 204 when the deletion
/// finished meanwhile.
pub(super) async fn retry_cleanup(
    State(g): State<Gateway>,
    p: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> RestResult {
    match g.admin.retry_cleanup(&path_part(p)?)? {
        Some(s) => with_status(StatusCode::ACCEPTED, json::connector_status(&s)),
        None => empty(StatusCode::NO_CONTENT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
