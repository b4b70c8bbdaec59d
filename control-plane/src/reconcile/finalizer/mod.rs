//! The deletion finalizer: turns a recorded deletion into a completed stop(true) of every
//! task and then of the connector instance, and only then forgets the connector.
//!
//! This file is the loop and the operator's intents (retry, force); `round.rs` is one
//! round's I/O (the stops, the cleanup-only starts); `step.rs` holds the decisions as
//! pure functions (which steps are due, a step's first call, which attempt an answer is,
//! what an attempt does to its step and its backoff), which the loop calls with the time
//! and a jitter draw and whose returned events it logs and counts.
//!
//! # Flow
//! 1. `DeleteConnector` seals the cleanup context (last config with secrets, task configs,
//!    the host, epoch and generation of every instance, incarnation, offsets, cleanup
//!    settings) into a deletion record and marks the connector deleting, in one store
//!    write, before it answers. The herder no longer touches the connector.
//! 2. This loop reads every pending deletion from the store (so it resumes after a restart)
//!    and advances each in its own task, in rounds: every due task step at once (one
//!    parallel fan-out), then the connector instance:
//!    - if the instance runs on its host and that host holds a lease at the recorded
//!      epoch: `StopTask`/`StopConnector(connector_deleted = true)` at the recorded
//!      generation, bounded by `cleanup.timeout.ms`;
//!    - otherwise (paused, stopped, failed, unassigned, host lost or re-registered, or the
//!      executor answers NOT_FOUND / FAILED_PRECONDITION / a replayed stop(false)): a fresh
//!      instance is started with `cleanup_only = true` and a new generation on a live
//!      executor with the plugin, preferring the last host, then stopped with `true`;
//!    - a cleanup-only instance whose stop(true) was sent but not confirmed (no answer,
//!      or the control plane restarted) is stopped again at its own generation before
//!      any new one is started.
//!
//!    Outcomes are written to the deletion record (state, executor, attempts, error) once
//!    per round that leaves something unfinished; a round where every stop completed
//!    goes on to the next one without a write, and the last one ends in the removal
//!    below. A stop still running after 250 ms is recorded RUNNING where it was sent.
//! 3. When every step is DONE or SKIPPED, the deletion record, the connector, its task
//!    configs, status and offsets are removed in one write, conditional on the deletion's
//!    revision.
//!
//! # Guarantees
//! - Every task and the connector instance of a deleted connector get a completed
//!   stop(true) (at least once), unless the operator forces or keeps resources, or the
//!   connector's `cleanup.policy` is `give-up` and `cleanup.max.attempts` ran out (then
//!   the skipped steps are logged at ERROR as a leak report).
//! - Nothing of the connector is removed before its cleanup finished; a crash at any
//!   point resumes from the store.
//! - Tasks are cleaned before the connector instance.
//! - A re-hosted cleanup starts only after the original instance's host answered that it
//!   does not run it, or after that host's lease expired (its epoch is fenced).
//!
//! # Assumptions
//! - Executors implement the lifecycle protocol: they refuse older generations and stale
//!   epochs, and replay a repeated stop without running it again.
//! - An executor whose lease expired stops its instances with `false` on its own and
//!   re-registers, so a fenced instance does not keep working.
//! - Plugins' cleanup is idempotent and tolerates a start that never ran.
//!
//! # Caveats
//! - Unreachable-but-leased executors are retried without counting attempts, so a
//!   deletion waits at most about one lease for a host that went silent.
//! - A stop(true) that the executor completed but whose answer was lost is sent again;
//!   the executor replays the recorded outcome, also after it fenced itself and
//!   registered again (it is asked at the recorded epoch, `step::ask_record_first`; a
//!   host registered again that is not live yet, its lease still to be granted or silent,
//!   is waited for). Only where that record is gone (the executor process restarted) or
//!   the host is gone (never registered again, or its new epoch lost too) does a
//!   re-hosted attempt run the plugin's cleanup a second time (at least once).
//! - `force` skips what is left even if a stop is in flight; that stop may still finish.
//!   Until it has ended the name cannot be taken again ([`super::deletions::Deletions::in_flight`]).
//! - A stop sent to a frozen executor holds up that deletion (not others) until that
//!   executor's lease expires (the call is then abandoned: the host is fenced), at most
//!   until the call's deadline, `max(cleanup.timeout.ms, 15 s) + 5 s`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use self::step::{
    Attempt, StepEvent, carry_over, ready_steps, record_outcome, retry_now, round_due,
};
pub use self::step::{
    CLEANUP_BACKOFF_BASE_MS, CLEANUP_BACKOFF_MAX_MS, CLEANUP_WAIT_BACKOFF_MAX_MS, forced_skips,
    given_up_skips, unit_list,
};
use super::cluster::{Cluster, HerderError, RECONCILE_INTERVAL_MS, now_ms};
use crate::model::{CleanupState, CleanupStep, DeletionRecord};

mod purge;
mod round;
mod step;

pub use self::purge::purge_owner;

/// Runs the finalizer until `cancel` fires.
///
/// Each pending deletion advances in its own task, so a deletion held up by a frozen
/// executor or a slow cleanup holds up no other, and a new deletion starts at once rather
/// than after the slowest one of a pass.
pub async fn run_finalizer(cluster: Arc<Cluster>, cancel: CancellationToken) {
    // Each running deletion's task, and the token that a force cancels: the round in
    // flight is not recalled, but no further stop or cleanup-only start is sent.
    let mut running: HashMap<String, (tokio::task::JoinHandle<()>, CancellationToken)> =
        HashMap::new();
    loop {
        running.retain(|_, (h, _)| !h.is_finished());
        let pass_started = std::time::Instant::now();
        // Only what this pass may act on is copied: a force or retry intent, or a round
        // that is due and not running (the same tests as below).
        let now = now_ms();
        let acts_on = |d: &DeletionRecord| {
            d.force_requested
                || d.retry_requested
                || (!running.contains_key(&d.name) && round_due(&d.steps, false, now))
        };
        match cluster.store.deletions_where(&acts_on) {
            Ok(deletions) => {
                for d in deletions {
                    // Intents recorded by the admin API are carried out here: a force
                    // also while a round of this deletion is in flight (it skips what
                    // runs), a retry only between rounds (see `retry_now`).
                    if d.force_requested {
                        if let Some((_, forced)) = running.get(&d.name) {
                            forced.cancel();
                        }
                        match apply_force(&cluster, &d.name) {
                            Ok(Some(finished)) => stop_forced_instances(cluster.clone(), finished),
                            Ok(None) => {}
                            Err(e) => {
                                warn!(connector = %d.name, error = %e, "forcing the deletion failed; retrying");
                            }
                        }
                        continue;
                    }
                    if retry_now(d.retry_requested, running.contains_key(&d.name))
                        && let Err(e) = apply_retry(&cluster, &d.name)
                    {
                        warn!(connector = %d.name, error = %e, "retrying the cleanup failed; retrying");
                    }
                    // A round with nothing due (steps in backoff, exhausted) would do
                    // nothing but make an exported span every pass: skip it.
                    if running.contains_key(&d.name)
                        || !round_due(&d.steps, d.retry_requested, now_ms())
                    {
                        continue;
                    }
                    let c = cluster.clone();
                    let name = d.name.clone();
                    let forced = CancellationToken::new();
                    let forced_in_task = forced.clone();
                    cluster.deletions.set_in_flight(&name, true);
                    // Not awaited: a later pass sees it finished; aborted at shutdown.
                    // One span per round, in the trace of the DeleteConnector call (its
                    // traceparent is in the record; a trace of its own when none is).
                    let span = wharf::trace::DirectSpan::started(
                        &wharf::trace::TraceContext::from_traceparent(&d.traceparent),
                        wharf::trace::SpanBuilder::from_name("deletion round").with_attributes([
                            wharf::trace::KeyValue::new("connector", name.clone()),
                        ]),
                        tracing::info_span!(
                            "deletion round",
                            connector = %name,
                            trace_id = tracing::field::Empty,
                        ),
                    );
                    let handle = wharf::task::spawn(
                        wharf::task::TaskKind::Detached,
                        "deletion step",
                        async move {
                            let result = span.around(advance(&c, &name, &forced_in_task)).await;
                            c.deletions.set_in_flight(&name, false);
                            match result {
                                // It wrote while this pass skipped it: look again now.
                                Ok(true) => c.finalizer_wake.notify_one(),
                                Ok(false) => {}
                                Err(e) => {
                                    warn!(connector = %name, error = %e, "deletion step failed; retrying");
                                }
                            }
                        },
                    );
                    running.insert(d.name, (handle, forced));
                }
            }
            Err(e) => warn!(error = %e, "finalizer pass failed; retrying"),
        }
        crate::observe::pass(crate::observe::FINALIZER_PASS_SECONDS, pass_started);
        tokio::select! {
            () = cancel.cancelled() => break,
            () = cluster.finalizer_wake.notified() => {}
            () = tokio::time::sleep(Duration::from_millis(RECONCILE_INTERVAL_MS)) => {}
        }
    }
    for (name, (h, _)) in running {
        h.abort();
        cluster.deletions.set_in_flight(&name, false);
    }
}

/// Finishes the deletion if complete: one conditional write removes everything.
///
/// The write is committed together with other deletions' writes when the store can
/// ([`crate::store::StateStore::finish_deletion_batched`]).
async fn finish_if_complete(cluster: &Cluster, d: &DeletionRecord) -> Result<bool, HerderError> {
    if !d.is_complete() {
        return Ok(false);
    }
    super::fault::crash_point("before_final_removal");
    // Every step is final: nothing of this deletion runs any more, so the name may be
    // taken again as soon as the removal below is visible (cleared first, so that a
    // client who sees the name gone can create it at once).
    cluster.deletions.set_in_flight(&d.name, false);
    keep_orphans(cluster, d)?;
    if cluster
        .store
        .finish_deletion_batched(&d.name, d.revision)
        .await?
    {
        let (tasks, connector) = forced_skips(d);
        let forced = unit_list(&tasks, connector);
        let (tasks, connector) = given_up_skips(d);
        let given_up = unit_list(&tasks, connector);
        if given_up.is_empty() {
            info!(connector = %d.name, forced = %forced, "deletion finished; connector removed");
        } else {
            warn!(connector = %d.name, given_up = %given_up, forced = %forced,
                "deletion finished with cleanup given up (cleanup.policy=give-up); connector removed, external resources of the given-up units may leak");
        }
        crate::observe::deletion_finished(d.mode.label());
        cluster.deletions.record_finished(d);
        cluster.changed(&d.name);
        return Ok(true);
    }
    Ok(false)
}

/// Before a deletion that did not clean everything finishes (force, give-up,
/// `keep_resources`: [`step::orphan_reason`]): stores what its ledger still holds as
/// orphans, which outlive the connector (docs/resources.md). Idempotent (orphan ids are
/// stable), so a finish that must be written again leaves them once.
fn keep_orphans(cluster: &Cluster, d: &DeletionRecord) -> Result<(), HerderError> {
    let Some(reason) = step::orphan_reason(d) else {
        return Ok(());
    };
    let Some(rec) = cluster.store.connector(&d.name)? else {
        return Ok(());
    };
    let orphans =
        crate::model::resources::orphans_of(&d.name, &rec.resources, &d.sealed, reason, now_ms());
    if orphans.is_empty() {
        return Ok(());
    }
    cluster.store.put_orphans(&orphans)?;
    for o in &orphans {
        warn!(connector = %d.name, reason = reason.as_str(), kind = %o.entry.resource.kind,
            resource = %o.entry.resource.name, locator = %o.entry.resource.locator, orphan = %o.id,
            "resource left behind by the deletion; listed in ListOrphanedResources");
    }
    Ok(())
}

/// Writes `d` back (committed together with other deletions' writes when the store can);
/// `base` is the record as this round last read or wrote it. When the record changed
/// underneath only by an operator's retry intent (`RetryCleanup` or a second
/// `DeleteConnector`, which set a flag while a round runs), the round's progress is
/// written over it, keeping the intent ([`carry_over`]); false for any other change
/// (reload next pass). On success both `d` and `base` are the record as stored.
async fn save(
    cluster: &Cluster,
    base: &mut DeletionRecord,
    d: &mut DeletionRecord,
) -> Result<bool, HerderError> {
    for _ in 0..INTENT_ATTEMPTS {
        if cluster.store.put_deletion_batched(d.clone()).await? {
            cluster.changed(&d.name);
            // Re-read to pick up the new revision.
            if let Some(fresh) = cluster.store.deletion(&d.name)? {
                *base = fresh.clone();
                *d = fresh;
            }
            return Ok(true);
        }
        let Some(fresh) = cluster.store.deletion(&d.name)? else {
            return Ok(false);
        };
        let Some(merged) = carry_over(base, d, &fresh) else {
            return Ok(false);
        };
        *base = fresh;
        *d = merged;
    }
    Ok(false)
}

/// How long a round's stops may run before their steps are recorded RUNNING (with the
/// executor they were sent to), in milliseconds. A fast round records only its outcomes
/// (one write); a slow cleanup shows up in the status as RUNNING while it runs.
const RUNNING_MARK_AFTER_MS: u64 = 250;

/// Makes progress on one deletion, in rounds: all due task steps at once (one parallel
/// fan-out of stops), then the connector step once every task step is final.
///
/// Writes: a round whose steps all complete writes nothing; its outcomes go into the next
/// write (the last round's into `finish_deletion`, which removes everything). So a
/// deletion whose stops all succeed on their hosts costs the store two commits
/// (`start_deletion`, `finish_deletion`) and two round trips (the task fan-out and the
/// connector stop). A stop sent again after a control-plane crash is safe: executors
/// record each stop per (instance, generation) and replay its outcome. A re-hosted
/// cleanup's generation is written before its instance is started, so that a crash never
/// leaves a cleanup-only instance the record does not know.
///
/// `forced` is cancelled when the operator forces the deletion: the round in flight
/// finishes (its stops were sent), and no further round or cleanup-only start follows.
///
/// Returns true when it wrote to the store (something may be due again at once).
#[tracing::instrument(skip(cluster, forced), level = "debug")]
async fn advance(
    cluster: &Cluster,
    name: &str,
    forced: &CancellationToken,
) -> Result<bool, HerderError> {
    let Some(mut d) = cluster.store.deletion(name)? else {
        return Ok(false);
    };
    if finish_if_complete(cluster, &d).await? {
        return Ok(true);
    }
    let mut base = d.clone();
    let view = cluster.executor_view()?;
    let mut dirty = false;
    loop {
        if forced.is_cancelled() {
            // The force removes the record; what this task still holds is not written.
            return Ok(false);
        }
        let ready = ready_steps(&d.steps, now_ms());
        if ready.is_empty() {
            break;
        }
        if d.steps
            .iter()
            .all(|s| s.state == CleanupState::Pending && s.attempts == 0)
        {
            super::fault::crash_point("before_fanout");
        }
        let Some(outcomes) =
            round::run_round(cluster, &mut base, &mut d, &ready, &view, forced).await?
        else {
            return Ok(true); // changed underneath: the next pass reloads
        };
        let all_done = outcomes
            .iter()
            .all(|(_, a)| matches!(a, Attempt::Done { .. }));
        for (idx, attempt) in outcomes {
            if let Attempt::Failed { error, .. } = &attempt {
                // The round's span says so too (docs/observability.md, "Traces").
                wharf::trace::fail_current(|| match d.steps[idx].task {
                    Some(t) => format!("cleanup step of task {t} failed: {error}"),
                    None => format!("cleanup step of the connector failed: {error}"),
                });
            }
            let event = record_outcome(&mut d, idx, attempt, now_ms(), rand::random::<f64>());
            report_step(&d, idx, event);
        }
        dirty = true;
        if !all_done {
            break; // something waits or failed: record it now
        }
    }
    if finish_if_complete(cluster, &d).await? {
        return Ok(true);
    }
    if dirty {
        save(cluster, &mut base, &mut d).await?;
    }
    Ok(dirty)
}

/// Logs and counts what recording an attempt did to step `idx` of `d`.
fn report_step(d: &DeletionRecord, idx: usize, event: StepEvent) {
    let s = &d.steps[idx];
    match event {
        StepEvent::Done => {
            info!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                attempts = s.attempts, outcome = "done", connector_deleted = d.mode.connector_deleted(), "cleanup step");
        }
        StepEvent::Rehost => {
            info!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                attempts = s.attempts, outcome = "rehost", "cleanup step");
        }
        StepEvent::GivenUp => {
            error!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                attempts = s.attempts, error = %s.last_error, abandoned = ?s.abandoned, outcome = "given_up",
                "cleanup given up (cleanup.policy=give-up): external resources of this instance may leak");
        }
        StepEvent::Exhausted => {
            error!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                attempts = s.attempts, error = %s.last_error, abandoned = ?s.abandoned, outcome = "exhausted",
                "cleanup failed cleanup.max.attempts times; connector stays DELETING until RetryCleanup or force");
        }
        StepEvent::Failed => {
            warn!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                attempts = s.attempts, error = %s.last_error, abandoned = ?s.abandoned, outcome = "failed", "cleanup step");
        }
        // The waiting state is logged at INFO once per change.
        StepEvent::Waiting {
            retry_in_ms,
            changed: true,
        } => {
            info!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                attempts = s.attempts, error = %s.last_error, retry_in_ms, outcome = "waiting",
                "cleanup step waits for an executor; retrying with backoff");
        }
        StepEvent::Waiting {
            retry_in_ms,
            changed: false,
        } => {
            debug!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                attempts = s.attempts, waits = s.waits, error = %s.last_error, retry_in_ms,
                outcome = "waiting", "cleanup step still waiting");
        }
    }
    if let Some(outcome) = event.counted(d.mode) {
        crate::observe::cleanup_attempt(outcome);
    }
}

/// Attempts of a read-modify-write of a deletion on a conflicting revision.
const INTENT_ATTEMPTS: usize = 16;

/// Records on the deletion of `name` that `set` is wanted (RetryCleanup, a repeated
/// delete, or `force`), for the finalizer to carry out, and wakes it. False when `name`
/// has no deletion.
fn record_intent(
    cluster: &Cluster,
    name: &str,
    set: impl Fn(&mut DeletionRecord) -> bool,
) -> Result<bool, HerderError> {
    for _ in 0..INTENT_ATTEMPTS {
        let Some(mut d) = cluster.store.deletion(name)? else {
            return Ok(false);
        };
        if !set(&mut d) {
            cluster.changed(name);
            return Ok(true); // already recorded
        }
        if cluster.store.put_deletion(&d)? {
            cluster.changed(name);
            return Ok(true);
        }
    }
    Err(HerderError::Contended(name.to_owned()))
}

/// Asks the finalizer to run failed or waiting steps again now (RetryCleanup, or a
/// repeated delete). False when `name` is not being deleted.
///
/// # Errors
/// Store failures, or [`HerderError::Contended`].
pub fn request_retry(cluster: &Cluster, name: &str) -> Result<bool, HerderError> {
    record_intent(cluster, name, |d| {
        !std::mem::replace(&mut d.retry_requested, true)
    })
}

/// Asks the finalizer to skip every step not yet final and finish the deletion (`force`).
/// False when `name` is not being deleted.
///
/// # Errors
/// Store failures, or [`HerderError::Contended`].
pub fn request_force(cluster: &Cluster, name: &str) -> Result<bool, HerderError> {
    record_intent(cluster, name, |d| {
        !std::mem::replace(&mut d.force_requested, true)
    })
}

/// Carries out a recorded retry: failed and waiting steps are due now, exhausted ones get
/// their attempts again.
fn apply_retry(cluster: &Cluster, name: &str) -> Result<(), HerderError> {
    for _ in 0..INTENT_ATTEMPTS {
        let Some(mut d) = cluster.store.deletion(name)? else {
            return Ok(());
        };
        if !step::retry_steps(&mut d) {
            return Ok(());
        }
        if cluster.store.put_deletion(&d)? {
            info!(connector = %name, "cleanup retry requested: failed steps run again now");
            cluster.changed(name);
            return Ok(());
        }
    }
    Err(HerderError::Contended(name.to_owned()))
}

/// Carries out a recorded force: every step not yet final is skipped (marked forced) and
/// the deletion finishes; returns the record as it finished (`None` when another pass
/// did). A stop still in flight may finish later; until the finalizer task of this
/// deletion ended the name is not taken again ([`super::deletions::Deletions::in_flight`]).
fn apply_force(cluster: &Cluster, name: &str) -> Result<Option<DeletionRecord>, HerderError> {
    for _ in 0..INTENT_ATTEMPTS {
        let Some(mut d) = cluster.store.deletion(name)? else {
            return Ok(None);
        };
        let (tasks, connector) = step::force_steps(&mut d);
        if !cluster.store.put_deletion(&d)? {
            continue;
        }
        let Some(d) = cluster.store.deletion(name)? else {
            return Ok(None);
        };
        keep_orphans(cluster, &d)?;
        if cluster.store.finish_deletion(name, d.revision)? {
            warn!(connector = %name, skipped_tasks = ?tasks, connector_skipped = connector,
                "deletion forced: remaining cleanup skipped; external resources may remain");
            crate::observe::deletion_finished("forced");
            cluster.deletions.record_finished(&d);
            cluster.changed(name);
            return Ok(Some(d));
        }
    }
    Err(HerderError::Contended(name.to_owned()))
}

/// Stops with `connector_deleted = false` what a force skipped and may still run: each
/// skipped step's instance on a live executor (tasks first, then the connector instance),
/// in the background. A force skips the cleanup, not the stop: without this the
/// connector instance of a deletion forced while its tasks' stops ran kept running on
/// its executor with nothing left to stop it. An instance already stopped (or stopping
/// under the stop in flight) answers from the executor's record; nothing runs twice.
fn stop_forced_instances(cluster: Arc<Cluster>, d: DeletionRecord) {
    wharf::task::spawn(
        wharf::task::TaskKind::Detached,
        "stop forced instances",
        async move {
            let view = match cluster.executor_view() {
                Ok(v) => v,
                Err(e) => {
                    warn!(connector = %d.name, error = %e, "forced deletion: its instances are not stopped (store error)");
                    return;
                }
            };
            let skipped: Vec<&CleanupStep> = d.steps.iter().filter(|s| s.forced).collect();
            for tasks in [true, false] {
                let stops = skipped
                    .iter()
                    .filter(|s| s.task.is_some() == tasks)
                    .filter_map(|s| {
                        let (executor, generation) = step::instance_of(&d, s);
                        view.live(&executor)
                            .map(|e| (s.task, e.clone(), generation))
                    })
                    .map(|(task, exec, generation)| {
                        let d = &d;
                        let cluster = &cluster;
                        async move {
                            let attempt =
                                round::stop(cluster, d, task, &exec, generation, None, None).await;
                            info!(connector = %d.name, task, executor = %exec.id, generation,
                                stopped = matches!(attempt, Attempt::Done { .. }),
                                "forced deletion: instance stopped with connector_deleted = false");
                        }
                    });
                futures::future::join_all(stops).await;
            }
        },
    );
}
