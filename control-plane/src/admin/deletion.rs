//! Deleting a connector: recording the deletion (the finalizer carries it out), a
//! waiting or forced delete, a repeated delete, and RetryCleanup.

use std::time::Duration;

use tracing::info;
use wharf::pb::v1 as pb;

use crate::grpc::convert;
use crate::model::{DeletionMode, DeletionRecord};
use crate::reconcile::{Cluster, finalizer, now_ms};

use super::{Admin, ApiError, ApiResult};

/// Wait bound of a waiting delete with no timeout given, in milliseconds.
pub const DEFAULT_DELETE_WAIT_MS: u32 = 30_000;
/// Attempts to record a deletion while the connector keeps changing.
const DELETE_RECORD_ATTEMPTS: usize = 16;
/// How long a forced delete waits for the finalizer to carry the force out, in
/// milliseconds (it is woken at once; this bounds a stalled store).
const FORCE_WAIT_MS: u64 = 10_000;

/// Waits until connector `name` is gone from the store, at most until `deadline`.
async fn wait_gone(
    cluster: &Cluster,
    changes: &mut tokio::sync::broadcast::Receiver<String>,
    name: &str,
    deadline: tokio::time::Instant,
) -> Result<(), ApiError> {
    while cluster.store.connector(name)?.is_some() {
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Err(_) => break,
            Ok(Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => break,
        }
    }
    Ok(())
}

/// How a deletion is asked for (`DeleteConnector`, `DELETE /connectors/{name}`).
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteOptions {
    /// Skip the cleanup steps still pending (external resources may remain).
    pub force: bool,
    /// Answer only once the connector is gone (or fail with [`ApiError::DeletionPending`]).
    pub wait: bool,
    /// Wait bound in milliseconds; 0 means [`DEFAULT_DELETE_WAIT_MS`].
    pub wait_timeout_ms: u32,
    /// Clean up (the default), or keep what the plugin provisioned (the request's
    /// `keep_resources`: every stop passes `connector_deleted = false`).
    pub mode: DeletionMode,
    /// Only answer the plan ([`pb::DeleteConnectorResponse::plan`]); change nothing.
    pub dry_run: bool,
}

impl Admin {
    /// DeleteConnector / `DELETE /connectors/{name}`: records the deletion (the finalizer
    /// carries it out); deleting again retries failed steps now (unless forcing).
    ///
    /// # Errors
    /// NOT_FOUND; ABORTED when the record kept changing; DEADLINE_EXCEEDED
    /// ([`ApiError::DeletionPending`]) when `wait` and the deletion did not finish.
    pub async fn delete(
        &self,
        name: &str,
        opts: DeleteOptions,
    ) -> ApiResult<pb::DeleteConnectorResponse> {
        let cluster = &self.cluster;
        convert::parse_name(name)?;
        if !opts.wait && opts.wait_timeout_ms != 0 {
            // A bound on a wait nobody asked for: the caller meant to wait, most likely.
            return Err(ApiError::InvalidArgument {
                field: "wait_timeout_ms".into(),
                reason: format!(
                    "is {} but wait is false: a wait bound needs wait = true (nothing was deleted)",
                    opts.wait_timeout_ms
                ),
            });
        }
        if opts.dry_run {
            let plan = self.deletion_plan(name, opts.mode)?;
            let rec = self.existing(name)?;
            return Ok(pb::DeleteConnectorResponse {
                deleted: false,
                status: Some(self.status_of(&rec)?),
                plan: Some(plan),
                ..Default::default()
            });
        }
        let mut changes = cluster.subscribe();
        let mut recorded = false;
        for _ in 0..DELETE_RECORD_ATTEMPTS {
            let rec = self.existing(name)?;
            if rec.deleting {
                // Deleting again in the other mode would be answered OK while the first
                // mode goes on: refused, so that the answer and the audit trail say so.
                let in_progress = cluster.store.deletion(name)?;
                if let Some(reason) = in_progress
                    .as_ref()
                    .and_then(|d| redelete_conflict(d.mode, opts))
                {
                    return Err(ApiError::DeletionModeConflict {
                        name: name.to_owned(),
                        reason,
                    });
                }
                // Deleting again: run failed steps once more now, unless forcing, which
                // skips them (a retry started first would run one more cleanup).
                if !opts.force {
                    finalizer::request_retry(cluster, name)?;
                }
                recorded = true;
                break;
            }
            let offsets = cluster.store.offsets(name)?;
            let mut d = DeletionRecord::seal(&rec, offsets, opts.mode, now_ms());
            // In the record itself: every round continues this call's trace, the first
            // one included (a finalizer pass may see the record before this call goes
            // on), on whichever replica runs it. Deleting again keeps the first trace.
            d.traceparent = wharf::trace::TraceContext::current()
                .traceparent()
                .unwrap_or_default();
            if cluster.store.start_deletion(&rec, &d)? {
                info!(connector = %name, generation_next = rec.next_generation,
                    mode = opts.mode.label(), "deletion recorded");
                cluster.changed(name);
                recorded = true;
                break;
            }
        }
        if !recorded {
            return Err(ApiError::Contended(name.to_owned()));
        }
        let mut skipped_tasks = Vec::new();
        let mut connector_cleanup_skipped = false;
        if opts.force && finalizer::request_force(cluster, name)? {
            // The finalizer carries the force out on its next pass (at once: it was woken).
            let deadline = tokio::time::Instant::now() + Duration::from_millis(FORCE_WAIT_MS);
            wait_gone(cluster, &mut changes, name, deadline).await?;
            if let Some(d) = cluster.deletions.finished(name) {
                (skipped_tasks, connector_cleanup_skipped) = finalizer::forced_skips(&d);
            }
        }
        let rec = if opts.wait {
            let ms = if opts.wait_timeout_ms == 0 {
                DEFAULT_DELETE_WAIT_MS
            } else {
                opts.wait_timeout_ms
            };
            let deadline = tokio::time::Instant::now() + Duration::from_millis(u64::from(ms));
            wait_gone(cluster, &mut changes, name, deadline).await?;
            let rec = cluster.store.connector(name)?;
            // An OK answer to a waiting delete means "gone": a script running
            // `DeleteConnector ... && next-step` must not go on while cleanup is pending.
            if rec.is_some() {
                return Err(ApiError::DeletionPending {
                    detail: pending_detail(cluster.store.deletion(name)?.as_ref()),
                    name: name.to_owned(),
                    waited_ms: ms,
                });
            }
            rec
        } else {
            cluster.store.connector(name)?
        };
        // A waiting delete that succeeded says what `cleanup.policy = give-up` left.
        let (given_up_tasks, connector_cleanup_given_up) = match cluster.deletions.finished(name) {
            Some(d) if opts.wait && rec.is_none() => finalizer::given_up_skips(&d),
            _ => (Vec::new(), false),
        };
        Ok(pb::DeleteConnectorResponse {
            deleted: rec.is_none(),
            status: match &rec {
                Some(r) => Some(self.status_of(r)?),
                None => None,
            },
            skipped_tasks,
            connector_cleanup_skipped,
            given_up_tasks,
            connector_cleanup_given_up,
            plan: None,
        })
    }

    /// RetryCleanup / `POST /connectors/{name}/cleanup/retry`: runs failed cleanup steps
    /// now. The status is `None` when the deletion finished meanwhile.
    ///
    /// # Errors
    /// NOT_FOUND; FAILED_PRECONDITION when the connector is not being deleted.
    pub fn retry_cleanup(&self, name: &str) -> ApiResult<Option<pb::ConnectorStatus>> {
        let cluster = &self.cluster;
        let rec = self.existing(name)?;
        if !rec.deleting || !finalizer::request_retry(cluster, name)? {
            return Err(ApiError::WrongState {
                name: name.to_owned(),
                reason: "is not being deleted".into(),
            });
        }
        match cluster.store.connector(name)? {
            Some(r) => Ok(Some(self.status_of(&r)?)),
            None => Ok(None),
        }
    }
}

/// The first unfinished cleanup step that has an error, for the DEADLINE_EXCEEDED answer
/// of a waiting delete: `"; first unfinished step: task 0 FAILED after 5 attempts: ..."`.
fn pending_detail(d: Option<&DeletionRecord>) -> String {
    let Some(step) = d.and_then(|d| {
        d.steps
            .iter()
            .find(|s| !s.state.is_final() && !s.last_error.is_empty())
    }) else {
        return String::new();
    };
    let which = match step.task {
        Some(t) => format!("task {t}"),
        None => "connector instance".to_owned(),
    };
    format!(
        "; first unfinished step: {which} {} after {} attempts: {}",
        format!("{:?}", step.state).to_uppercase(),
        step.attempts,
        step.last_error
    )
}

/// Why deleting again with `opts` cannot go with a deletion in progress that
/// was recorded in mode `recorded` (its steps stop with `connector_deleted = true`, or
/// false when it keeps resources), or `None` when it can: the same mode is a retry, and a force skips
/// what is pending whatever the mode (what it skipped stops with false).
fn redelete_conflict(recorded: DeletionMode, opts: DeleteOptions) -> Option<String> {
    use DeletionMode::{Cleanup, KeepResources};
    match (opts.force, recorded, opts.mode) {
        (true, _, _) | (false, Cleanup, Cleanup) | (false, KeepResources, KeepResources) => None,
        (false, Cleanup, KeepResources) => Some(
            "is already being deleted with cleanup (connector_deleted = true); keep_resources \
             cannot change a deletion in progress: wait for it to finish, or force it (force \
             skips the cleanup still pending)"
                .into(),
        ),
        (false, KeepResources, Cleanup) => Some(
            "is already being deleted with keep_resources (connector_deleted = false: its \
             resources are kept); a deletion that cleans up cannot change it: once the name \
             is free, create the connector again and delete it to clean up"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeletionMode::{Cleanup, KeepResources};

    fn mode(force: bool, keep_resources: bool) -> DeleteOptions {
        DeleteOptions {
            force,
            mode: DeletionMode::keeping_resources(keep_resources),
            ..DeleteOptions::default()
        }
    }

    #[test]
    fn deleting_again_in_the_same_mode_is_a_retry() {
        assert_eq!(redelete_conflict(Cleanup, mode(false, false)), None);
        assert_eq!(redelete_conflict(KeepResources, mode(false, true)), None);
    }

    #[test]
    fn keep_resources_over_a_cleanup_in_progress_is_refused() {
        let reason = redelete_conflict(Cleanup, mode(false, true)).expect("refused");
        assert!(reason.contains("being deleted with cleanup"), "{reason}");
        assert!(reason.contains("force"), "{reason}");
    }

    #[test]
    fn a_cleanup_over_a_keep_resources_deletion_is_refused() {
        let reason = redelete_conflict(KeepResources, mode(false, false)).expect("refused");
        assert!(
            reason.contains("being deleted with keep_resources"),
            "{reason}"
        );
    }

    #[test]
    fn a_force_goes_with_either_mode() {
        for recorded in [Cleanup, KeepResources] {
            for keep in [true, false] {
                assert_eq!(redelete_conflict(recorded, mode(true, keep)), None);
            }
        }
    }
}
