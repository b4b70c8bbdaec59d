//! The deletion finalizer: turns a recorded deletion into a completed stop(true) of every
//! task and then of the connector instance, and only then forgets the connector.
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
//!   registered again (it is asked at the recorded epoch, [`ask_record_first`]). Only
//!   where that record is gone (the executor process restarted) or the host cannot be
//!   asked (silent, or lost) does a re-hosted attempt run the plugin's cleanup a second
//!   time (at least once).
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

use super::client::{CallError, ConnectorStart, StopCall, StopOutcome, TaskStart};
use super::cluster::{CallKind, Cluster, ExecutorView, HerderError, RECONCILE_INTERVAL_MS, now_ms};
use crate::model::{
    CleanupState, CleanupStep, DeletionRecord, ExecutorRecord, Instance, reported_error,
};
use crate::plan::unit::{Action, Host, Hosted, Want, decide};

/// First retry delay after a failed cleanup attempt, in milliseconds (doubles per attempt).
pub const CLEANUP_BACKOFF_BASE_MS: i64 = 200;
/// Longest retry delay between cleanup attempts, in milliseconds.
pub const CLEANUP_BACKOFF_MAX_MS: i64 = 10_000;

/// Longest delay between two retries of a step that waits for an executor, in
/// milliseconds: shorter than [`CLEANUP_BACKOFF_MAX_MS`] so that a returning executor or
/// an expired lease is noticed soon.
pub const CLEANUP_WAIT_BACKOFF_MAX_MS: i64 = 2_000;

fn backoff_ms(attempts: u32) -> i64 {
    let shift = attempts.min(16);
    (CLEANUP_BACKOFF_BASE_MS << shift).min(CLEANUP_BACKOFF_MAX_MS)
}

/// Delay before the retry after the `waits`-th consecutive wait (1-based): the failed
/// attempts' doubling backoff, capped at [`CLEANUP_WAIT_BACKOFF_MAX_MS`].
fn wait_backoff_ms(waits: u32) -> i64 {
    backoff_ms(waits.saturating_sub(1)).min(CLEANUP_WAIT_BACKOFF_MAX_MS)
}

/// `delay_ms` with "equal jitter": half fixed, half scaled by `random` in [0, 1], so that
/// the steps of many deletions waiting for one executor do not retry in step.
fn jittered_ms(delay_ms: i64, random: f64) -> i64 {
    let half = delay_ms / 2;
    half + (half as f64 * random.clamp(0.0, 1.0)) as i64
}

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
        crate::observe::deletion_finished(if d.cleanup {
            "cleanup"
        } else {
            "keep_resources"
        });
        cluster.deletions.record_finished(d);
        cluster.changed(&d.name);
        return Ok(true);
    }
    Ok(false)
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

/// A round's progress `ours` on top of `fresh`, the record as stored now, when the only
/// change since `base` (what the round read or last wrote) is the operator's retry
/// intent; `None` for any other change: a force (it skips what is left and finishes),
/// steps written by another writer (a replica that leads now), or another deletion of
/// the same name.
fn carry_over(
    base: &DeletionRecord,
    ours: &DeletionRecord,
    fresh: &DeletionRecord,
) -> Option<DeletionRecord> {
    let same_deletion = fresh.requested_at_ms == base.requested_at_ms
        && fresh.sealed.incarnation == base.sealed.incarnation;
    let same_progress = fresh.cleanup == base.cleanup
        && fresh.steps == base.steps
        && fresh.next_generation == base.next_generation;
    match (same_deletion, same_progress, fresh.force_requested) {
        (true, true, false) => Some(DeletionRecord {
            retry_requested: fresh.retry_requested,
            revision: fresh.revision,
            ..ours.clone()
        }),
        (true, true, true) | (true, false, _) | (false, _, _) => None,
    }
}

/// How long a round's stops may run before their steps are recorded RUNNING (with the
/// executor they were sent to), in milliseconds. A fast round records only its outcomes
/// (one write); a slow cleanup shows up in the status as RUNNING while it runs.
const RUNNING_MARK_AFTER_MS: u64 = 250;

/// Indexes of the steps to run now: every due task step, or the connector step once all
/// task steps are final (tasks are cleaned before the connector instance).
fn ready_steps(d: &DeletionRecord) -> Vec<usize> {
    ready_steps_at(&d.steps, now_ms())
}

/// [`ready_steps`] at `now` (Unix milliseconds).
fn ready_steps_at(steps: &[CleanupStep], now: i64) -> Vec<usize> {
    let tasks_final = steps
        .iter()
        .filter(|s| s.task.is_some())
        .all(|s| s.state.is_final());
    steps
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            !s.state.is_final() && s.next_attempt_ms <= now && (s.task.is_some() || tasks_final)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Whether a round of a deletion with `steps` has anything to do at `now_ms` (Unix
/// milliseconds): a step is due, every step is final (the record is removed), or the
/// operator asked for a retry (`retry_requested`, carried out in this pass, so the
/// steps read before it may be stale).
fn round_due(steps: &[CleanupStep], retry_requested: bool, now: i64) -> bool {
    retry_requested
        || steps.iter().all(|s| s.state.is_final())
        || !ready_steps_at(steps, now).is_empty()
}

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
        let ready = ready_steps(&d);
        if ready.is_empty() {
            break;
        }
        if d.steps
            .iter()
            .all(|s| s.state == CleanupState::Pending && s.attempts == 0)
        {
            super::fault::crash_point("before_fanout");
        }
        let Some(outcomes) = run_round(cluster, &mut base, &mut d, &ready, &view, forced).await?
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
            record_outcome(&mut d, idx, attempt);
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

/// Where an attempt ended.
enum Attempt {
    /// stop(true) (or stop(false) when keeping resources) completed.
    Done { executor: String },
    /// The instance is not where the record says: run a cleanup-only instance next.
    Rehost,
    /// The plugin's stop failed or timed out: counts as an attempt. `abandoned` when the
    /// executor abandoned the instance (its stop timed out, its plugin call still runs).
    Failed {
        executor: String,
        error: String,
        abandoned: bool,
    },
    /// No answer, or no capable executor: retry later without counting.
    Wait { error: String },
}

impl Attempt {
    /// The `outcome` label of [`crate::observe::CLEANUP_STEP_SECONDS`].
    fn outcome_label(&self) -> &'static str {
        match self {
            Attempt::Done { .. } => "done",
            Attempt::Rehost => "rehost",
            Attempt::Failed { .. } => "failed",
            Attempt::Wait { .. } => "wait",
        }
    }
}

fn host_of(d: &DeletionRecord, task: Option<u32>) -> Instance {
    match task {
        Some(t) => d
            .sealed
            .task_hosts
            .get(t as usize)
            .cloned()
            .unwrap_or_else(Instance::unassigned),
        None => d.sealed.connector_host.clone(),
    }
}

/// The first call of a step in a round.
enum Plan {
    /// Stop the instance where the record says it runs, at its recorded generation.
    Stop {
        exec: ExecutorRecord,
        generation: u64,
        /// False for a cleanup-only instance already recorded RUNNING (nothing to mark).
        mark_running: bool,
        /// The epoch to send when not the executor's current one (see
        /// [`ask_record_first`]).
        epoch: Option<u64>,
    },
    /// No call: the outcome is known.
    Outcome(Attempt),
}

/// The first call of step `idx`, from facts only (the record and the executor view):
/// the unit's cell of [`decide`]. Every instance that still exists on a live executor,
/// failed ones included, is stopped itself; a cleanup-only instance is only for a unit
/// that no executor hosts; nothing is sent to a host that missed heartbeats.
fn plan_step(d: &DeletionRecord, idx: usize, view: &ExecutorView) -> Plan {
    let step = &d.steps[idx];
    let flag = d.cleanup;
    if step.rehosted {
        // A cleanup-only instance started by an earlier attempt (or before a control-plane
        // restart) whose stop was not confirmed: stop that one rather than start another.
        if step.state == CleanupState::Running && flag {
            let epoch = view.all.get(&step.executor).map_or(0, |e| e.epoch);
            match view.host(Some(&step.executor), epoch) {
                Host::Live => {
                    if let Some(exec) = view.live(&step.executor) {
                        return Plan::Stop {
                            exec: exec.clone(),
                            generation: step.generation,
                            mark_running: false,
                            epoch: None,
                        };
                    }
                }
                Host::Unresponsive => {
                    return Plan::Outcome(Attempt::Wait {
                        error: "executor of the cleanup-only instance does not answer heartbeats"
                            .into(),
                    });
                }
                Host::Lost => {}
            }
        }
        return if flag {
            Plan::Outcome(Attempt::Rehost)
        } else {
            Plan::Outcome(Attempt::Done {
                executor: String::new(),
            })
        };
    }
    let host = host_of(d, step.task);
    let want = if flag {
        Want::Deleted
    } else {
        Want::DeletedKeepResources
    };
    let health = view.host(host.executor.as_deref(), host.epoch);
    match decide(want, Hosted::from_recorded(host.state), health) {
        Action::Stop { .. } => match host.executor.as_deref().and_then(|e| view.live(e)) {
            Some(exec) => Plan::Stop {
                exec: exec.clone(),
                generation: host.generation,
                mark_running: true,
                epoch: None,
            },
            None => Plan::Outcome(Attempt::Wait {
                error: "host executor not live".into(),
            }),
        },
        Action::CleanupOnly => {
            let now = host
                .executor
                .as_deref()
                .and_then(|id| Some((view.all.get(id)?.epoch, *view.health.get(id)?)));
            match host.executor.as_deref().and_then(|e| view.live(e)) {
                Some(exec)
                    if ask_record_first(Hosted::from_recorded(host.state), host.epoch, now) =>
                {
                    // Addressed to the recorded epoch: only a stop this executor already
                    // claimed is answered (from its record); anything else is refused and
                    // the cleanup re-hosted.
                    Plan::Stop {
                        exec: exec.clone(),
                        generation: host.generation,
                        mark_running: true,
                        epoch: Some(host.epoch),
                    }
                }
                Some(_) | None => Plan::Outcome(Attempt::Rehost),
            }
        }
        Action::Done => Plan::Outcome(Attempt::Done {
            executor: String::new(),
        }),
        Action::Wait => Plan::Outcome(Attempt::Wait {
            error: "host executor does not answer heartbeats; waiting for it or its lease".into(),
        }),
        // Not answers for a deletion.
        Action::Keep | Action::Start | Action::Record => Plan::Outcome(Attempt::Wait {
            error: "no cleanup decision".into(),
        }),
    }
}

/// Whether a deleted unit that [`decide`] would re-host is first asked for at its
/// recorded host (docs/contract.md, "A completed stop is replayed"): when that executor
/// registered again since the instance was recorded (same id, a newer epoch, for
/// instance after fencing itself during a control-plane failover) and is live now, it
/// may hold the record of the stop(true) already run there, whose answer was lost. The
/// stop then goes to it at the recorded epoch and generation: the executor answers from
/// the record, or refuses (nothing claimed there, or the record is gone) and the cleanup
/// is re-hosted, so a cleanup runs twice only where its record is gone (at least once).
///
/// `hosted` is the recorded instance, `recorded_epoch` the epoch it was recorded under,
/// `now` the executor's current epoch and health (`None`: not registered).
fn ask_record_first(hosted: Hosted, recorded_epoch: u64, now: Option<(u64, Host)>) -> bool {
    match hosted {
        // Nothing was started there, or its stop overran: no completed stop to replay.
        Hosted::Absent | Hosted::Abandoned => false,
        Hosted::Starting | Hosted::Running | Hosted::Failed | Hosted::Stopping => match now {
            None => false,
            Some((epoch, health)) => {
                let registered_again = epoch > recorded_epoch;
                match health {
                    Host::Live => registered_again,
                    // A silent host would hold the call; a lost one cannot answer.
                    Host::Unresponsive | Host::Lost => false,
                }
            }
        },
    }
}

/// Runs one round: the planned stops in parallel, then, for the instances that are not
/// where the record says, fresh cleanup-only instances (their generations written first).
/// `base` is the record as stored when last read or written ([`save`]). Returns each
/// ready step's outcome, or None when the record changed underneath.
async fn run_round(
    cluster: &Cluster,
    base: &mut DeletionRecord,
    d: &mut DeletionRecord,
    ready: &[usize],
    view: &ExecutorView,
    forced: &CancellationToken,
) -> Result<Option<Vec<(usize, Attempt)>>, HerderError> {
    let flag = d.cleanup;
    let mut outcomes: Vec<(usize, Attempt)> = Vec::with_capacity(ready.len());
    let mut stops = Vec::new();
    for &idx in ready {
        match plan_step(d, idx, view) {
            Plan::Stop {
                exec,
                generation,
                mark_running,
                epoch,
            } => stops.push((idx, exec, generation, mark_running, epoch)),
            Plan::Outcome(a) => outcomes.push((idx, a)),
        }
    }

    if !stops.is_empty() {
        // The stops read a snapshot: the record itself may be rewritten meanwhile.
        let snapshot = d.clone();
        let record = &snapshot;
        let fan_out = stops.iter().map(|(idx, exec, generation, _, epoch)| {
            let task = record.steps[*idx].task;
            // No span of its own: the executor's StopTask/StopConnector span is a child of
            // the round's (traceparent), and the step's outcome is a log event with its
            // task, executor and generation. A span per step was a third of a deletion's
            // spans, each made on the control plane's busiest path (bench/NOTES.md).
            async move {
                let started = std::time::Instant::now();
                let attempt = stop(cluster, record, task, exec, *generation, flag, *epoch).await;
                crate::observe::cleanup_step_duration(attempt.outcome_label(), started.elapsed());
                (*idx, attempt)
            }
        });
        let mut fan_out = std::pin::pin!(tasks_first_done(fan_out, record));
        let slow = tokio::time::sleep(Duration::from_millis(RUNNING_MARK_AFTER_MS));
        let results = tokio::select! {
            r = &mut fan_out => r,
            () = slow => {
                // Still running: make the steps visible as RUNNING where they were sent.
                let mut marked = d.clone();
                for (idx, exec, _, mark, _) in &stops {
                    if *mark {
                        marked.steps[*idx].state = CleanupState::Running;
                        marked.steps[*idx].executor = exec.id.clone();
                    }
                }
                if save(cluster, base, &mut marked).await? {
                    *d = marked;
                }
                fan_out.await
            }
        };
        outcomes.extend(results);
    }

    // Instances that are not where the record says: start cleanup-only ones, on a live
    // executor with the plugin, preferring the last host (local state such as a SQLite
    // file lives there).
    let mut starts = Vec::new();
    for (idx, attempt) in &mut outcomes {
        if !flag || !matches!(attempt, Attempt::Rehost) {
            continue;
        }
        let host = host_of(d, d.steps[*idx].task);
        let placeable =
            |e: &&ExecutorRecord| e.has_plugin(&d.sealed.plugin) && view.placeable.contains(&e.id);
        let preferred = host.executor.as_deref().and_then(|e| view.live(e));
        let exec = preferred
            .filter(placeable)
            .or_else(|| view.all.values().find(placeable))
            .cloned();
        let Some(exec) = exec else {
            *attempt = Attempt::Wait {
                error: format!("no live executor offers plugin {}", d.sealed.plugin),
            };
            continue;
        };
        let generation = d.next_generation;
        d.next_generation += 1;
        let s = &mut d.steps[*idx];
        s.state = CleanupState::Running;
        s.executor = exec.id.clone();
        s.generation = generation;
        s.rehosted = true;
        starts.push((*idx, exec, generation));
    }
    if !starts.is_empty() {
        if forced.is_cancelled() || !save(cluster, base, d).await? {
            return Ok(None);
        }
        let record: &DeletionRecord = d;
        let rehosted = starts.iter().map(|(idx, exec, generation)| async move {
            let task = record.steps[*idx].task;
            (
                *idx,
                start_then_stop(cluster, record, task, exec, *generation).await,
            )
        });
        for (idx, attempt) in futures::future::join_all(rehosted).await {
            if let Some(slot) = outcomes.iter_mut().find(|(i, _)| *i == idx) {
                slot.1 = attempt;
            }
        }
    }
    Ok(Some(outcomes))
}

/// Awaits every stop of a round; the `mid_fanout` crash point fires when a task's stop
/// completed while another task's is still in flight.
async fn tasks_first_done<F>(
    stops: impl Iterator<Item = F>,
    d: &DeletionRecord,
) -> Vec<(usize, Attempt)>
where
    F: std::future::Future<Output = (usize, Attempt)>,
{
    use futures::StreamExt;
    let mut pending: futures::stream::FuturesUnordered<F> = stops.collect();
    let mut out = Vec::with_capacity(pending.len());
    while let Some((idx, attempt)) = pending.next().await {
        if !pending.is_empty()
            && d.steps[idx].task.is_some()
            && matches!(attempt, Attempt::Done { .. })
        {
            super::fault::crash_point("mid_fanout");
        }
        out.push((idx, attempt));
    }
    out
}

/// Starts a cleanup-only instance at `generation` on `exec`, then stops it with `true`.
async fn start_then_stop(
    cluster: &Cluster,
    d: &DeletionRecord,
    task: Option<u32>,
    exec: &ExecutorRecord,
    generation: u64,
) -> Attempt {
    // A frozen executor would hold the start until the call's deadline; once its lease is
    // gone it is fenced, so stop waiting for it (as for stops).
    let started = tokio::select! {
        r = start_cleanup_only(cluster, d, task, exec, generation) => r,
        () = cluster.lease_lost(exec) => Err(CallError::Unreachable {
            address: exec.address.clone(),
            message: "lease expired while the cleanup-only start was pending; call abandoned".into(),
        }),
    };
    cluster.note_reach(exec, CallKind::Start, started.as_ref().err());
    match started {
        // Unreachable, or between epochs: try again without counting.
        Err(
            e @ (CallError::Unreachable { .. }
            | CallError::Refused {
                code: tonic::Code::FailedPrecondition,
                ..
            }),
        ) => Attempt::Wait {
            error: e.to_string(),
        },
        Err(e) => Attempt::Failed {
            executor: exec.id.clone(),
            error: e.to_string(),
            abandoned: false,
        },
        Ok(()) => match stop(cluster, d, task, exec, generation, true, None).await {
            Attempt::Rehost => Attempt::Failed {
                executor: exec.id.clone(),
                error: "cleanup-only instance was not found at stop".into(),
                abandoned: false,
            },
            other => other,
        },
    }
}

/// Applies one attempt's outcome to its step (state, attempts, error, backoff) and emits
/// the step's tracing event.
fn record_outcome(d: &mut DeletionRecord, idx: usize, attempt: Attempt) {
    let flag = d.cleanup;
    let max = d.sealed.cleanup_max_attempts;
    let gives_up = d.sealed.gives_up;
    let s = &mut d.steps[idx];
    match attempt {
        Attempt::Done { executor } => {
            s.attempts += 1;
            s.state = if flag {
                CleanupState::Done
            } else {
                CleanupState::Skipped
            };
            s.connector_deleted = flag;
            if !executor.is_empty() {
                s.executor = executor;
            }
            s.last_error.clear();
            s.waits = 0;
            info!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                attempts = s.attempts, outcome = "done", connector_deleted = flag, "cleanup step");
            crate::observe::cleanup_attempt(if flag { "done" } else { "skipped" });
        }
        Attempt::Rehost => {
            // The original instance is gone: the next attempt runs cleanup-only.
            s.rehosted = true;
            s.state = CleanupState::Pending;
            s.next_attempt_ms = 0;
            s.waits = 0;
            info!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                attempts = s.attempts, outcome = "rehost", "cleanup step");
            crate::observe::cleanup_attempt("rehost");
        }
        Attempt::Failed {
            executor,
            error,
            abandoned,
        } => {
            s.attempts += 1;
            if abandoned {
                // Said in the final steps: the executor still holds this instance's call.
                s.abandoned
                    .push(format!("generation {} on {executor}", s.generation));
            }
            s.executor = executor;
            s.last_error = error;
            s.waits = 0;
            // The instance that failed to stop is gone; a new attempt starts a fresh one.
            s.rehosted = true;
            if s.attempts >= max {
                if gives_up {
                    s.state = CleanupState::Skipped;
                    error!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                        attempts = s.attempts, error = %s.last_error, abandoned = ?s.abandoned, outcome = "given_up",
                        "cleanup given up (cleanup.policy=give-up): external resources of this instance may leak");
                    crate::observe::cleanup_attempt("given_up");
                } else {
                    s.state = CleanupState::Failed;
                    s.next_attempt_ms = i64::MAX;
                    error!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                        attempts = s.attempts, error = %s.last_error, abandoned = ?s.abandoned, outcome = "exhausted",
                        "cleanup failed cleanup.max.attempts times; connector stays DELETING until RetryCleanup or force");
                    crate::observe::cleanup_attempt("exhausted");
                }
            } else {
                s.state = CleanupState::Failed;
                s.next_attempt_ms = now_ms() + backoff_ms(s.attempts);
                warn!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                    attempts = s.attempts, error = %s.last_error, abandoned = ?s.abandoned, outcome = "failed", "cleanup step");
                crate::observe::cleanup_attempt("failed");
            }
        }
        Attempt::Wait { error } => {
            // A step whose stop was sent stays RUNNING, so that the same instance is
            // stopped on the next attempt instead of a new one being started.
            if s.state != CleanupState::Running {
                s.state = CleanupState::Pending;
            }
            // Waiting retries back off like failed attempts; the waiting state is logged
            // at INFO once per change.
            let changed = s.waits == 0 || s.last_error != error;
            s.waits = s.waits.saturating_add(1);
            s.last_error = error;
            let delay_ms = jittered_ms(wait_backoff_ms(s.waits), rand::random::<f64>());
            s.next_attempt_ms = now_ms() + delay_ms;
            if changed {
                info!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                    attempts = s.attempts, error = %s.last_error, retry_in_ms = delay_ms, outcome = "waiting",
                    "cleanup step waits for an executor; retrying with backoff");
            } else {
                debug!(connector = %d.name, task = s.task, generation = s.generation, executor = %s.executor,
                    attempts = s.attempts, waits = s.waits, error = %s.last_error, retry_in_ms = delay_ms,
                    outcome = "waiting", "cleanup step still waiting");
            }
        }
    }
}

async fn start_cleanup_only(
    cluster: &Cluster,
    d: &DeletionRecord,
    task: Option<u32>,
    exec: &ExecutorRecord,
    generation: u64,
) -> Result<(), CallError> {
    let sealed = &d.sealed;
    match task {
        Some(t) => {
            let start = TaskStart {
                connector: d.name.clone(),
                task: t,
                connector_config: sealed.config.clone(),
                task_config: sealed
                    .task_configs
                    .get(t as usize)
                    .cloned()
                    .unwrap_or_default(),
                generation,
                paused: false,
                cleanup_only: true,
                offsets: sealed.offsets.clone(),
                incarnation: sealed.incarnation.clone(),
            };
            cluster
                .clients
                .start_task_on(exec, &start)
                .await
                .map(|_| ())
        }
        None => {
            let start = ConnectorStart {
                connector: d.name.clone(),
                config: sealed.config.clone(),
                generation,
                paused: false,
                cleanup_only: true,
                incarnation: sealed.incarnation.clone(),
            };
            cluster
                .clients
                .start_connector_on(exec, &start)
                .await
                .map(|_| ())
        }
    }
}

/// Sends the stop with `flag` (under `epoch` when not `exec`'s current one) and
/// classifies the answer.
async fn stop(
    cluster: &Cluster,
    d: &DeletionRecord,
    task: Option<u32>,
    exec: &ExecutorRecord,
    generation: u64,
    flag: bool,
    epoch: Option<u64>,
) -> Attempt {
    let timeout_ms = d.sealed.cleanup_timeout_ms;
    let request = StopCall {
        connector: d.name.clone(),
        task,
        generation,
        connector_deleted: flag,
        timeout_ms,
        incarnation: d.sealed.incarnation.clone(),
        executor_epoch: epoch,
    };
    let call = async {
        cluster
            .clients
            .stop_on(exec, &request)
            .await
            .map(|s| (s.outcome, s.connector_deleted, s.error, s.abandoned))
    };
    // A frozen or partitioned host would hold this deletion until the call's deadline
    // (tens of seconds); once its lease is gone it is fenced, so stop waiting for it. An
    // executor that registered again meanwhile (it fenced itself) still answers: wait.
    let result = tokio::select! {
        r = call => r,
        () = cluster.lease_lost_at_every_epoch(&exec.id) => Err(CallError::Unreachable {
            address: exec.address.clone(),
            message: "lease expired while the stop was pending; call abandoned".into(),
        }),
    };
    cluster.note_reach(exec, CallKind::Stop, result.as_ref().err());
    // An unanswered stop becomes a wait, logged by the caller once per change.
    if matches!(&result, Err(e) if e.code().is_none()) {
        debug!(connector = %d.name, task = task, generation, executor = %exec.id, connector_deleted = flag,
            result = ?result.as_ref().map(|r| r.0), "cleanup stop sent; no answer");
    } else {
        info!(connector = %d.name, task = task, generation, executor = %exec.id, connector_deleted = flag,
            result = ?result.as_ref().map(|r| r.0), "cleanup stop sent");
    }
    classify_stop(result, flag, &exec.id, timeout_ms)
}

/// Which attempt a stop's answer is (asked with `flag`, sent to `executor`, bounded by
/// `timeout_ms`). One exhaustive decision over the answer:
/// - stopped with the flag asked: done;
/// - stopped, failed or timed out with the other flag: a stop with that flag already ran
///   on this instance (a pause or a restart beat the deletion, or the executor fenced
///   itself and answers from its record): it is gone and its cleanup has not run, so the
///   cleanup is re-hosted;
/// - failed or timed out with the flag asked: a failed attempt (counted, backed off);
/// - refused NOT_FOUND or FAILED_PRECONDITION: the instance is not there (any more), or
///   the stop was decided under a stale epoch or generation: re-hosted;
/// - refused with another code: a failed attempt;
/// - no answer: wait, uncounted.
fn classify_stop(
    result: Result<(StopOutcome, bool, String, bool), CallError>,
    flag: bool,
    executor: &str,
    timeout_ms: u32,
) -> Attempt {
    match result {
        Ok((_, deleted, _, _)) if deleted != flag => Attempt::Rehost,
        Ok((StopOutcome::Stopped, _, _, _)) => Attempt::Done {
            executor: executor.to_owned(),
        },
        // The executor's texts are cut before they are stored in the step's last_error.
        Ok((StopOutcome::Failed, _, error, abandoned)) => Attempt::Failed {
            executor: executor.to_owned(),
            error: reported_error(error),
            abandoned,
        },
        Ok((StopOutcome::TimedOut, _, error, abandoned)) => Attempt::Failed {
            executor: executor.to_owned(),
            error: timed_out_error(timeout_ms, reported_error(error)),
            abandoned,
        },
        Err(e) => match e.code() {
            Some(tonic::Code::NotFound | tonic::Code::FailedPrecondition) => Attempt::Rehost,
            Some(_) => Attempt::Failed {
                executor: executor.to_owned(),
                error: reported_error(e.to_string()),
                abandoned: false,
            },
            None => Attempt::Wait {
                error: e.to_string(),
            },
        },
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

/// Whether a recorded retry (`RetryCleanup`, or a second `DeleteConnector`) is carried out
/// in this pass: only when no round of the deletion is in flight. A round in flight runs
/// its stops and then writes their outcomes (and its RUNNING marks) conditionally on the
/// record's revision; a retry written under it made those writes fail, so the status
/// showed the round's steps as they were before it until it had ended. Waiting costs
/// nothing: no new round of that deletion starts before the running one ends anyway, and
/// the retry then also covers what that round left failed.
fn retry_now(retry_requested: bool, round_in_flight: bool) -> bool {
    match (retry_requested, round_in_flight) {
        (true, false) => true,
        (true, true) | (false, _) => false,
    }
}

/// Carries out a recorded retry: failed and waiting steps are due now, exhausted ones get
/// their attempts again.
fn apply_retry(cluster: &Cluster, name: &str) -> Result<(), HerderError> {
    for _ in 0..INTENT_ATTEMPTS {
        let Some(mut d) = cluster.store.deletion(name)? else {
            return Ok(());
        };
        if !d.retry_requested {
            return Ok(());
        }
        d.retry_requested = false;
        for s in &mut d.steps {
            if !s.state.is_final() {
                if s.state == CleanupState::Failed {
                    s.state = CleanupState::Pending;
                }
                s.next_attempt_ms = 0;
                s.waits = 0;
            }
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
        let mut tasks = Vec::new();
        let mut connector = false;
        for s in &mut d.steps {
            if !s.state.is_final() {
                s.state = CleanupState::Skipped;
                s.connector_deleted = false;
                s.forced = true;
                match s.task {
                    Some(t) => tasks.push(t),
                    None => connector = true,
                }
            }
        }
        if !cluster.store.put_deletion(&d)? {
            continue;
        }
        let Some(d) = cluster.store.deletion(name)? else {
            return Ok(None);
        };
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

/// Where the instance of a step runs, as (executor id, generation): the cleanup-only
/// instance's once re-hosted, else the one the record sealed.
fn instance_of(d: &DeletionRecord, step: &CleanupStep) -> (String, u64) {
    if step.rehosted {
        (step.executor.clone(), step.generation)
    } else {
        let host = host_of(d, step.task);
        (host.executor.unwrap_or_default(), host.generation)
    }
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
                        let (executor, generation) = instance_of(&d, s);
                        view.live(&executor)
                            .map(|e| (s.task, e.clone(), generation))
                    })
                    .map(|(task, exec, generation)| {
                        let d = &d;
                        let cluster = &cluster;
                        async move {
                            let attempt =
                                stop(cluster, d, task, &exec, generation, false, None).await;
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

/// What a forced deletion skipped, from its final record: task indexes, and whether the
/// connector instance's step was skipped.
pub fn forced_skips(d: &DeletionRecord) -> (Vec<u32>, bool) {
    units(d.steps.iter().filter(|s| s.forced))
}

/// What `cleanup.policy = give-up` skipped, from a deletion's final record: task
/// indexes, and whether the connector instance's step was one. Such a step is SKIPPED
/// with its stop(true) still asked; a `keep_resources` step that stopped with false is
/// SKIPPED too but asked for no cleanup, and a forced one is the force's.
pub fn given_up_skips(d: &DeletionRecord) -> (Vec<u32>, bool) {
    units(d.steps.iter().filter(|s| is_given_up(s)))
}

/// Whether step `s` was given up under `cleanup.policy = give-up` ([`given_up_skips`]).
fn is_given_up(s: &CleanupStep) -> bool {
    s.state == CleanupState::Skipped && s.connector_deleted && !s.forced
}

/// `steps` as task indexes and whether the connector instance's step is among them.
fn units<'a>(steps: impl Iterator<Item = &'a crate::model::CleanupStep>) -> (Vec<u32>, bool) {
    let mut tasks = Vec::new();
    let mut connector = false;
    for s in steps {
        match s.task {
            Some(t) => tasks.push(t),
            None => connector = true,
        }
    }
    (tasks, connector)
}

/// Task indexes `tasks` and the connector instance (when `connector`) as a log line or
/// an answer names them: `task 0, task 2, connector`.
pub fn unit_list(tasks: &[u32], connector: bool) -> String {
    let mut names: Vec<String> = tasks.iter().map(|t| format!("task {t}")).collect();
    if connector {
        names.push("connector".into());
    }
    names.join(", ")
}

/// The error of an attempt whose stop overran `timeout_ms`: the executor's own text when
/// it says so already ("stop timed out after ... waiting for ..."), else prefixed.
fn timed_out_error(timeout_ms: u32, error: String) -> String {
    if error.starts_with("stop timed out") {
        error
    } else if error.is_empty() {
        format!("stop timed out after {timeout_ms} ms")
    } else {
        format!("stop timed out after {timeout_ms} ms: {error}")
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn a_timed_out_stop_says_so_once() {
        let executor = "stop timed out after 3000 ms waiting for stop; instance abandoned";
        assert_eq!(timed_out_error(3000, executor.into()), executor);
        assert_eq!(
            timed_out_error(500, "boom".into()),
            "stop timed out after 500 ms: boom"
        );
        assert_eq!(
            timed_out_error(500, String::new()),
            "stop timed out after 500 ms"
        );
    }

    #[test]
    fn units_are_named_tasks_first_then_the_connector() {
        assert_eq!(unit_list(&[0, 2], true), "task 0, task 2, connector");
        assert_eq!(unit_list(&[1], false), "task 1");
        assert_eq!(unit_list(&[], false), "");
    }

    #[test]
    fn waits_back_off_doubling_up_to_their_cap() {
        assert_eq!(wait_backoff_ms(1), CLEANUP_BACKOFF_BASE_MS);
        assert_eq!(wait_backoff_ms(2), CLEANUP_BACKOFF_BASE_MS * 2);
        assert_eq!(wait_backoff_ms(60), CLEANUP_WAIT_BACKOFF_MAX_MS);
    }

    #[test]
    fn jitter_keeps_half_and_scales_the_other_half() {
        assert_eq!(jittered_ms(2_000, 0.0), 1_000);
        assert_eq!(jittered_ms(2_000, 1.0), 2_000);
        assert_eq!(jittered_ms(2_000, 0.5), 1_500);
        assert_eq!(jittered_ms(2_000, 9.0), 2_000);
        assert_eq!(jittered_ms(0, 1.0), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORDED: u64 = 4;

    /// A deletion of one task, as the round read it (revision 7).
    fn base_record() -> DeletionRecord {
        let spec = crate::model::ConnectorSpec {
            name: wharf::ids::ConnectorName::parse("c1").expect("name"),
            plugin: "test-source".into(),
            tasks_max: std::num::NonZeroU32::new(1).expect("one"),
            config: Default::default(),
        };
        let mut rec = crate::model::ConnectorRecord::new(&spec, crate::model::TargetState::Started);
        rec.tasks = vec![Instance::unassigned()];
        let mut d = DeletionRecord::seal(&rec, vec![], true, 1_000);
        d.revision = 7;
        d
    }

    /// `base` with the task's step DONE: a round's progress.
    fn progressed(base: &DeletionRecord) -> DeletionRecord {
        let mut ours = base.clone();
        ours.steps[0].state = CleanupState::Done;
        ours.steps[1].state = CleanupState::Running;
        ours
    }

    #[test]
    fn a_retry_recorded_under_a_round_keeps_the_rounds_progress_and_the_intent() {
        let base = base_record();
        let ours = progressed(&base);
        let mut fresh = base.clone();
        fresh.retry_requested = true;
        fresh.revision = 8;
        let merged = carry_over(&base, &ours, &fresh).expect("carried over");
        assert_eq!(merged.steps, ours.steps);
        assert!(merged.retry_requested);
        assert_eq!(merged.revision, 8, "written on the fresh revision");
    }

    #[test]
    fn a_force_recorded_under_a_round_is_not_written_over() {
        let base = base_record();
        let mut fresh = base.clone();
        fresh.force_requested = true;
        fresh.revision = 8;
        assert!(carry_over(&base, &progressed(&base), &fresh).is_none());
    }

    #[test]
    fn steps_another_writer_changed_are_not_written_over() {
        let base = base_record();
        let mut fresh = base.clone();
        fresh.steps[0].attempts = 1;
        fresh.revision = 8;
        assert!(carry_over(&base, &progressed(&base), &fresh).is_none());
        let mut fresh = base.clone();
        fresh.next_generation += 1;
        assert!(carry_over(&base, &progressed(&base), &fresh).is_none());
    }

    #[test]
    fn another_deletion_of_the_same_name_is_not_written_over() {
        let base = base_record();
        let mut fresh = base.clone();
        fresh.requested_at_ms += 1;
        assert!(carry_over(&base, &progressed(&base), &fresh).is_none());
    }

    #[test]
    fn a_retry_between_rounds_is_carried_out() {
        assert!(retry_now(true, false));
    }

    #[test]
    fn a_retry_waits_for_the_round_in_flight() {
        assert!(!retry_now(true, true));
    }

    #[test]
    fn no_retry_requested_is_nothing_to_do() {
        assert!(!retry_now(false, false));
        assert!(!retry_now(false, true));
    }

    /// The attempt an answer `(outcome, flag it ran with, error, abandoned)` to a
    /// stop(true) is.
    fn answered(outcome: StopOutcome, deleted: bool, abandoned: bool) -> Attempt {
        classify_stop(
            Ok((outcome, deleted, "boom".into(), abandoned)),
            true,
            "e1",
            500,
        )
    }

    fn refused(code: tonic::Code) -> Attempt {
        let e = CallError::Refused {
            address: "a".into(),
            code,
            message: "no".into(),
        };
        classify_stop(Err(e), true, "e1", 500)
    }

    #[test]
    fn a_stop_that_ran_with_the_flag_asked_is_done() {
        assert!(matches!(
            answered(StopOutcome::Stopped, true, false),
            Attempt::Done { executor } if executor == "e1"
        ));
    }

    #[test]
    fn a_stop_that_ran_with_the_other_flag_is_re_hosted() {
        // A pause, a restart or the executor's own fencing stopped it first: replayed.
        for outcome in [
            StopOutcome::Stopped,
            StopOutcome::Failed,
            StopOutcome::TimedOut,
        ] {
            assert!(matches!(answered(outcome, false, false), Attempt::Rehost));
        }
    }

    #[test]
    fn a_stop_that_failed_with_the_flag_asked_is_a_failed_attempt() {
        assert!(matches!(
            answered(StopOutcome::Failed, true, false),
            Attempt::Failed { error, abandoned: false, .. } if error == "boom"
        ));
    }

    #[test]
    fn a_stop_that_failed_with_a_huge_error_is_a_failed_attempt_with_the_error_cut() {
        let attempt = classify_stop(
            Ok((StopOutcome::Failed, true, "e".repeat(3_000_000), false)),
            true,
            "e1",
            500,
        );
        let Attempt::Failed { error, .. } = attempt else {
            panic!("a failed attempt");
        };
        crate::model::assert_reported_cut(&error, 3_000_000);
    }

    #[test]
    fn a_stop_that_timed_out_is_a_failed_attempt_that_says_so_and_whether_abandoned() {
        assert!(matches!(
            answered(StopOutcome::TimedOut, true, true),
            Attempt::Failed { error, abandoned: true, .. }
                if error == "stop timed out after 500 ms: boom"
        ));
    }

    #[test]
    fn a_stop_refused_as_not_hosted_is_re_hosted() {
        assert!(matches!(refused(tonic::Code::NotFound), Attempt::Rehost));
    }

    #[test]
    fn a_stop_refused_as_stale_is_re_hosted() {
        assert!(matches!(
            refused(tonic::Code::FailedPrecondition),
            Attempt::Rehost
        ));
    }

    #[test]
    fn a_stop_refused_otherwise_is_a_failed_attempt() {
        assert!(matches!(
            refused(tonic::Code::InvalidArgument),
            Attempt::Failed {
                abandoned: false,
                ..
            }
        ));
    }

    #[test]
    fn a_stop_without_an_answer_waits_uncounted() {
        let e = CallError::Unreachable {
            address: "a".into(),
            message: "deadline".into(),
        };
        assert!(matches!(
            classify_stop(Err(e), true, "e1", 500),
            Attempt::Wait { .. }
        ));
    }

    #[test]
    fn a_host_that_registered_again_is_asked_for_the_record_of_the_stop() {
        for hosted in [
            Hosted::Starting,
            Hosted::Running,
            Hosted::Failed,
            Hosted::Stopping,
        ] {
            assert!(ask_record_first(
                hosted,
                RECORDED,
                Some((RECORDED + 1, Host::Live))
            ));
        }
    }

    #[test]
    fn a_unit_never_started_is_re_hosted_without_asking() {
        assert!(!ask_record_first(
            Hosted::Absent,
            RECORDED,
            Some((RECORDED + 1, Host::Live))
        ));
    }

    #[test]
    fn an_abandoned_instance_is_re_hosted_without_asking() {
        assert!(!ask_record_first(
            Hosted::Abandoned,
            RECORDED,
            Some((RECORDED + 1, Host::Live))
        ));
    }

    #[test]
    fn a_host_that_is_not_registered_is_not_asked() {
        assert!(!ask_record_first(Hosted::Running, RECORDED, None));
    }

    #[test]
    fn a_host_whose_lease_ran_out_at_the_recorded_epoch_is_not_asked() {
        assert!(!ask_record_first(
            Hosted::Running,
            RECORDED,
            Some((RECORDED, Host::Lost))
        ));
    }

    #[test]
    fn a_host_registered_again_but_silent_is_not_asked() {
        assert!(!ask_record_first(
            Hosted::Running,
            RECORDED,
            Some((RECORDED + 1, Host::Unresponsive))
        ));
    }

    #[test]
    fn a_host_registered_again_and_lost_again_is_not_asked() {
        assert!(!ask_record_first(
            Hosted::Running,
            RECORDED,
            Some((RECORDED + 1, Host::Lost))
        ));
    }
}

#[cfg(test)]
mod round_due_tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn step(task: Option<u32>, state: CleanupState, next_attempt_ms: i64) -> CleanupStep {
        CleanupStep {
            task,
            state,
            executor: "e1".into(),
            attempts: 0,
            last_error: String::new(),
            rehosted: false,
            connector_deleted: true,
            generation: 1,
            next_attempt_ms,
            waits: 0,
            forced: false,
            abandoned: Vec::new(),
        }
    }

    #[test]
    fn only_a_skipped_cleanup_that_was_not_forced_is_given_up() {
        let given_up = step(Some(0), CleanupState::Skipped, i64::MAX);
        assert!(is_given_up(&given_up));
        let kept = CleanupStep {
            connector_deleted: false,
            ..given_up.clone()
        };
        assert!(
            !is_given_up(&kept),
            "a keep_resources step that stopped with false"
        );
        let forced = CleanupStep {
            connector_deleted: false,
            forced: true,
            ..given_up.clone()
        };
        assert!(!is_given_up(&forced), "a forced step is the force's");
        assert!(!is_given_up(&step(None, CleanupState::Done, i64::MAX)));
        assert!(!is_given_up(&step(None, CleanupState::Failed, i64::MAX)));
    }

    #[test]
    fn a_new_deletion_is_due() {
        let steps = [
            step(Some(0), CleanupState::Pending, NOW),
            step(None, CleanupState::Pending, NOW),
        ];
        assert!(round_due(&steps, false, NOW));
    }

    #[test]
    fn a_deletion_whose_steps_all_wait_for_their_backoff_is_not_due() {
        let steps = [
            step(Some(0), CleanupState::Failed, NOW + 500),
            step(None, CleanupState::Pending, NOW),
        ];
        assert!(!round_due(&steps, false, NOW));
    }

    #[test]
    fn an_exhausted_deletion_is_not_due() {
        let steps = [
            step(Some(0), CleanupState::Failed, i64::MAX),
            step(None, CleanupState::Pending, NOW),
        ];
        assert!(!round_due(&steps, false, NOW));
    }

    #[test]
    fn a_retry_request_makes_it_due() {
        let steps = [
            step(Some(0), CleanupState::Failed, i64::MAX),
            step(None, CleanupState::Pending, NOW),
        ];
        assert!(round_due(&steps, true, NOW));
    }

    #[test]
    fn the_connector_step_is_due_once_every_task_step_is_final() {
        let steps = [
            step(Some(0), CleanupState::Done, NOW),
            step(None, CleanupState::Pending, NOW),
        ];
        assert!(round_due(&steps, false, NOW));
    }

    #[test]
    fn a_complete_deletion_is_due_for_its_removal() {
        let steps = [
            step(Some(0), CleanupState::Done, NOW),
            step(None, CleanupState::Skipped, i64::MAX),
        ];
        assert!(round_due(&steps, false, NOW));
    }
}
