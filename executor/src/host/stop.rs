//! How a hosted instance stops: why ([`StopCause`]), the one stop path every connector
//! instance and task takes ([`stop`]), and the one report after it.
//!
//! A stop, in order: the instance's own work ends (a task's work loop, bounded by the
//! stop's deadline); the plugin's call in progress is waited for; the flag is confirmed
//! against the lease (`confirm_deleted`); the plugin's stop runs on the plugin runtime;
//! the instance's calls end (abandoned when the stop overran); after a deletion the
//! runtime removes what it made for the instance (a sink connector's log consumer); then
//! the state, the counters, the log line and the status report ([`finish_stop`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use wharf::pb::v1 as pb;

use super::instance::{Instance, InstanceId, report_state};
use super::{Shared, panic_text};
use crate::registry_client::LeaseStanding;

/// Why an instance is stopped, in Kafka Connect's terms. Only a deletion passes
/// `connector_deleted = true` to the plugin (KIP-883/KIP-901); every other cause passes
/// `false` ([`StopCause::connector_deleted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// The control plane stops it because the connector was deleted: the plugin removes
    /// what it provisioned in external systems.
    Deleted,
    /// The control plane stops it for anything else: a restart, a reconfiguration, a
    /// rebalance that moves it to another executor, a pause, the STOPPED target state, a
    /// deletion that keeps the external resources.
    Requested,
    /// A newer generation of it was started on this executor.
    Superseded,
    /// This executor shuts down.
    Shutdown,
    /// This executor fenced itself: its lease may have expired, or the control plane
    /// refused its epoch.
    Fenced,
}

impl StopCause {
    /// The flag the plugin's stop is asked to run with: true only for a deletion. (A
    /// destructive stop is still confirmed against the lease just before it runs:
    /// `confirm_deleted`.)
    pub fn connector_deleted(self) -> bool {
        match self {
            StopCause::Deleted => true,
            StopCause::Requested
            | StopCause::Superseded
            | StopCause::Shutdown
            | StopCause::Fenced => false,
        }
    }

    /// True for a stop this executor decided on its own (not asked for by the control
    /// plane): once it stopped cleanly it is reported UNASSIGNED, so that the control
    /// plane places it again.
    pub fn executor_decided(self) -> bool {
        match self {
            StopCause::Deleted | StopCause::Requested => false,
            StopCause::Superseded | StopCause::Shutdown | StopCause::Fenced => true,
        }
    }

    /// The cause as log lines show it.
    pub fn as_str(self) -> &'static str {
        match self {
            StopCause::Deleted => "deleted",
            StopCause::Requested => "requested",
            StopCause::Superseded => "superseded",
            StopCause::Shutdown => "shutdown",
            StopCause::Fenced => "fenced",
        }
    }
}

/// How a stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// The plugin's stop returned Ok.
    Stopped,
    /// The plugin's stop returned an error or panicked.
    Failed,
    /// The stop overran its timeout: the instance was abandoned and its output fenced.
    TimedOut,
}

/// What happened when an instance was stopped; kept so that a repeated stop reports it.
#[derive(Debug, Clone)]
pub struct StopRecord {
    /// How it ended.
    pub outcome: StopOutcome,
    /// The flag the stop ran with.
    pub connector_deleted: bool,
    /// The plugin's error text, or why the stop timed out.
    pub error: Option<String>,
    /// Generation of the stopped instance.
    pub generation: u64,
    /// Time the stop took.
    pub elapsed: Duration,
}

/// A stop's record and whether this caller only replayed it.
#[derive(Debug, Clone)]
pub struct StopResult {
    /// The record of the one stop that ran.
    pub record: StopRecord,
    /// True when this request found the stop already claimed: nothing ran for it.
    pub replayed: bool,
}

/// What an instance tells the control plane once its stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterStop {
    /// The executor stopped it on its own (see [`StopCause::executor_decided`]): report
    /// it UNASSIGNED so that the control plane places it again.
    ReportUnassigned,
    /// Stopped as asked: the stop's answer says so, nothing more to report.
    Nothing,
    /// The stop failed or timed out: report the instance's state (FAILED).
    ReportState,
}

/// The decision behind [`AfterStop`], the same for connector instances and tasks.
fn after_stop(outcome: StopOutcome, cause: StopCause) -> AfterStop {
    match outcome {
        StopOutcome::Stopped if cause.executor_decided() => AfterStop::ReportUnassigned,
        StopOutcome::Stopped => AfterStop::Nothing,
        StopOutcome::Failed | StopOutcome::TimedOut => AfterStop::ReportState,
    }
}

/// Stops `instance` for `cause` within `timeout`, once (see `Lifecycle::stop_once`):
/// every later caller gets the record of that one stop.
pub(crate) async fn stop<I: Instance>(
    instance: &Arc<I>,
    cause: StopCause,
    timeout: Duration,
) -> StopResult {
    let me = instance.clone();
    instance
        .life()
        .stop_once(move || async move { run_stop(&*me, cause, timeout).await })
        .await
}

/// The stop itself, in the order the module doc gives.
async fn run_stop<I: Instance>(instance: &I, cause: StopCause, timeout: Duration) -> StopRecord {
    let started = Instant::now();
    let deadline = started + timeout;
    let (outcome, error, connector_deleted) =
        stop_plugin(instance, cause, started, deadline, timeout).await;
    // The plugin's text may quote a resolved or secret value.
    let error = error.map(|e| instance.life().redact(e));
    // Pending calls are cancelled; an abandoned one stuck in its call ends when it returns.
    instance.plugin_stop().0.end_calls(instance.slot(), outcome);
    let (outcome, error) = match instance.consumer_deleted_with_it() {
        Some(consumer) if connector_deleted && outcome == StopOutcome::Stopped => {
            match instance.shared().log.delete_consumer(&consumer).await {
                Ok(_) => (outcome, error),
                Err(e) => (
                    StopOutcome::Failed,
                    Some(format!("cannot delete log consumer {consumer}: {e}")),
                ),
            }
        }
        Some(_) | None => (outcome, error),
    };
    // What the runtime recorded in the ledger itself (a sink's consumer group, a
    // source's created topics) is accounted for after the plugin's own cleanup.
    let (outcome, error) = if connector_deleted && outcome == StopOutcome::Stopped {
        match instance.runtime_cleanup().await {
            Ok(()) => (outcome, error),
            Err(e) => (StopOutcome::Failed, Some(e)),
        }
    } else {
        (outcome, error)
    };
    let record = StopRecord {
        outcome,
        connector_deleted,
        error,
        generation: instance.life().generation,
        elapsed: started.elapsed(),
    };
    finish_stop(instance, cause, &record);
    record
}

/// Ends the instance's work, then runs its plugin's stop, both by `deadline`: how it
/// ended, and the flag the plugin's stop ran with (the asked-for one when it never ran).
async fn stop_plugin<I: Instance>(
    instance: &I,
    cause: StopCause,
    started: Instant,
    deadline: Instant,
    timeout: Duration,
) -> (StopOutcome, Option<String>, bool) {
    let asked = cause.connector_deleted();
    if let Some(work) = instance.begin_stop(cause, started)
        && tokio::time::timeout_at(deadline, work).await.is_err()
    {
        let error = timed_out_text(timeout, "the work loop");
        return (StopOutcome::TimedOut, Some(error), asked);
    }
    let what = instance.id().what();
    let confirm = || confirm_deleted(instance.shared(), cause, &what);
    let (cell, waited_for) = instance.plugin_stop();
    match cell.spawn_stop(instance.slot(), &confirm, deadline).await {
        None => (
            StopOutcome::TimedOut,
            Some(timed_out_text(timeout, waited_for)),
            asked,
        ),
        Some((confirmed, handle)) => {
            let (outcome, error) = await_plugin_stop(handle, deadline, timeout).await;
            (outcome, error, confirmed)
        }
    }
}

/// The one report after every stop: the instance's final state (and the abandoned
/// counter), the log line, and the status report [`after_stop`] asks for.
fn finish_stop<I: Instance>(instance: &I, cause: StopCause, record: &StopRecord) {
    let life = instance.life();
    life.finish(record.outcome, &record.error);
    let (generation, connector_deleted, outcome) =
        (life.generation, record.connector_deleted, record.outcome);
    let (elapsed_ms, error) = (record.elapsed.as_millis() as u64, record.error.as_deref());
    let cause_name = cause.as_str();
    match instance.id() {
        InstanceId::Connector(name) => {
            tracing::info!(connector = %name, generation, cause = cause_name,
            connector_deleted, outcome = ?outcome, elapsed_ms, error, "connector stopped")
        }
        InstanceId::Task(key) => tracing::info!(connector = %key.connector, task = key.task,
            generation, cause = cause_name, connector_deleted, outcome = ?outcome, elapsed_ms, error, "task stopped"),
    }
    match after_stop(outcome, cause) {
        AfterStop::ReportUnassigned => {
            instance.id().report(
                instance.shared(),
                generation,
                pb::State::Unassigned,
                String::new(),
            );
        }
        AfterStop::Nothing => {}
        AfterStop::ReportState => report_state(instance, &life.state()),
    }
}

/// The flag a stop runs with, decided just before the plugin's stop is called: a
/// destructive stop runs only while the lease certainly holds; otherwise it runs with
/// `false` (the deletion then re-hosts its cleanup) and a heartbeat is asked for, which
/// fences this executor.
fn confirm_deleted(shared: &Shared, cause: StopCause, what: &str) -> bool {
    if !cause.connector_deleted() {
        return false;
    }
    match shared.registry.lease_standing() {
        LeaseStanding::Held => true,
        standing @ (LeaseStanding::Unregistered | LeaseStanding::MayHaveExpired) => {
            tracing::warn!(
                what,
                ?standing,
                "lease may have expired before the plugin's stop(true): stopping with connector_deleted=false instead"
            );
            shared.registry.beat_now();
            false
        }
    }
}

/// Awaits a spawned plugin stop until `deadline`; on overrun the call is aborted (it may
/// still hold its plugin worker: the instance is abandoned either way).
async fn await_plugin_stop(
    handle: JoinHandle<Result<(), String>>,
    deadline: Instant,
    timeout: Duration,
) -> (StopOutcome, Option<String>) {
    let abort = handle.abort_handle();
    match tokio::time::timeout_at(deadline, handle).await {
        Ok(Ok(Ok(()))) => (StopOutcome::Stopped, None),
        Ok(Ok(Err(e))) => (StopOutcome::Failed, Some(e)),
        Ok(Err(join)) => (StopOutcome::Failed, Some(panic_text(join))),
        Err(_) => {
            abort.abort();
            (StopOutcome::TimedOut, Some(timed_out_text(timeout, "stop")))
        }
    }
}

/// Why a stop timed out.
fn timed_out_text(timeout: Duration, waiting_for: &str) -> String {
    format!(
        "stop timed out after {} ms waiting for {waiting_for}; instance abandoned and its output fenced",
        timeout.as_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY_CAUSE: [StopCause; 5] = [
        StopCause::Deleted,
        StopCause::Requested,
        StopCause::Superseded,
        StopCause::Shutdown,
        StopCause::Fenced,
    ];

    #[test]
    fn a_deletion_stops_with_connector_deleted_true() {
        assert!(StopCause::Deleted.connector_deleted());
        assert!(!StopCause::Deleted.executor_decided());
    }

    #[test]
    fn a_requested_stop_restart_reconfiguration_move_pause_or_stopped_passes_false() {
        assert!(!StopCause::Requested.connector_deleted());
        assert!(!StopCause::Requested.executor_decided());
    }

    #[test]
    fn a_superseded_instance_stops_with_false_and_is_reported_unassigned() {
        assert!(!StopCause::Superseded.connector_deleted());
        assert!(StopCause::Superseded.executor_decided());
    }

    #[test]
    fn a_shutdown_stops_with_false_and_is_reported_unassigned() {
        assert!(!StopCause::Shutdown.connector_deleted());
        assert!(StopCause::Shutdown.executor_decided());
    }

    #[test]
    fn a_fenced_executor_stops_with_false_and_is_reported_unassigned() {
        assert!(!StopCause::Fenced.connector_deleted());
        assert!(StopCause::Fenced.executor_decided());
    }

    #[test]
    fn only_a_deletion_passes_connector_deleted_true() {
        let deleted: Vec<_> = EVERY_CAUSE
            .into_iter()
            .filter(|c| c.connector_deleted())
            .collect();
        assert_eq!(deleted, [StopCause::Deleted]);
    }

    #[test]
    fn every_cause_has_its_own_name() {
        let mut names: Vec<_> = EVERY_CAUSE.iter().map(|c| c.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), EVERY_CAUSE.len());
    }

    #[test]
    fn a_clean_stop_the_executor_decided_is_reported_unassigned() {
        for cause in [
            StopCause::Superseded,
            StopCause::Shutdown,
            StopCause::Fenced,
        ] {
            assert_eq!(
                after_stop(StopOutcome::Stopped, cause),
                AfterStop::ReportUnassigned
            );
        }
    }

    #[test]
    fn a_requested_clean_stop_reports_nothing_more() {
        for cause in [StopCause::Deleted, StopCause::Requested] {
            assert_eq!(after_stop(StopOutcome::Stopped, cause), AfterStop::Nothing);
        }
    }

    #[test]
    fn a_failed_or_timed_out_stop_reports_the_state_whatever_its_cause() {
        for outcome in [StopOutcome::Failed, StopOutcome::TimedOut] {
            for cause in EVERY_CAUSE {
                assert_eq!(after_stop(outcome, cause), AfterStop::ReportState);
            }
        }
    }
}
