//! The finalizer's decisions, as plain functions of a deletion record, an executor
//! snapshot and the values the loop passes in (the time, a jitter draw): which steps run
//! now, what a step's first call is, which attempt an executor's answer is, and what an
//! attempt does to its step. No I/O, no clock, no randomness, no logging or metrics here:
//! what to log and count comes back as a [`StepEvent`] that the loop reports.
//!
//! Of the executors, the decisions read one snapshot, [`ExecutorView`]: its `host` and
//! `live` answers, and its maps in two helpers only ([`registered`], [`cleanup_host`]).

use super::super::client::{CallError, StopOutcome, Stopped};
use super::super::cluster::ExecutorView;
use crate::model::{
    CleanupState, CleanupStep, DeletionMode, DeletionRecord, ExecutorRecord, Instance,
    reported_error,
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

/// Delay before the next attempt after `attempts` failed ones, in milliseconds.
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

/// Where an attempt ended.
#[derive(Debug)]
pub(super) enum Attempt {
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
    pub(super) fn outcome_label(&self) -> &'static str {
        match self {
            Attempt::Done { .. } => "done",
            Attempt::Rehost => "rehost",
            Attempt::Failed { .. } => "failed",
            Attempt::Wait { .. } => "wait",
        }
    }
}

/// Where the instance of a unit (`task`, or the connector instance) was when the
/// deletion was recorded.
pub(super) fn host_of(d: &DeletionRecord, task: Option<u32>) -> Instance {
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

/// Where the instance of a step runs, as (executor id, generation): the cleanup-only
/// instance's once re-hosted, else the one the record sealed.
pub(super) fn instance_of(d: &DeletionRecord, step: &CleanupStep) -> (String, u64) {
    if step.rehosted {
        (step.executor.clone(), step.generation)
    } else {
        let host = host_of(d, step.task);
        (host.executor.unwrap_or_default(), host.generation)
    }
}

/// The first call of a step in a round.
#[derive(Debug)]
pub(super) enum Plan {
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

/// The executor `id`'s current epoch and health in `view`; `None` when not registered.
fn registered(view: &ExecutorView, id: &str) -> Option<(u64, Host)> {
    Some((view.all.get(id)?.epoch, *view.health.get(id)?))
}

/// What [`ask_record_first`] knows of an executor's current registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Registration {
    /// The epoch the store has it registered at.
    epoch: u64,
    /// Its health at that epoch ([`ExecutorView::host`]).
    health: Host,
    /// The store marked that epoch lost (its lease ran out): it is gone, not on its way.
    marked_lost: bool,
}

/// The executor `id`'s current registration in `view`; `None` when not registered.
fn registration(view: &ExecutorView, id: &str) -> Option<Registration> {
    let record = view.all.get(id)?;
    Some(Registration {
        epoch: record.epoch,
        health: *view.health.get(id)?,
        marked_lost: record.lost,
    })
}

/// The first call of step `idx`, from facts only (the record and the executor view):
/// the unit's cell of [`decide`]. Every instance that still exists on a live executor,
/// failed ones included, is stopped itself; a cleanup-only instance is only for a unit
/// that no executor hosts; nothing is sent to a host that missed heartbeats.
pub(super) fn plan_step(d: &DeletionRecord, idx: usize, view: &ExecutorView) -> Plan {
    let step = &d.steps[idx];
    if step.rehosted {
        return plan_rehosted(d.mode, step, view);
    }
    let host = host_of(d, step.task);
    let want = match d.mode {
        DeletionMode::Cleanup => Want::Deleted,
        DeletionMode::KeepResources => Want::DeletedKeepResources,
    };
    let hosted = Hosted::from_recorded(host.state);
    let live = host.executor.as_deref().and_then(|e| view.live(e));
    match decide(
        want,
        hosted,
        view.host(host.executor.as_deref(), host.epoch),
    ) {
        Action::Stop { .. } => match live {
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
                .and_then(|id| registration(view, id));
            match (ask_record_first(hosted, host.epoch, now), live) {
                (RecordFirst::Ask, Some(exec)) => {
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
                (RecordFirst::Wait, _) | (RecordFirst::Ask, None) => Plan::Outcome(Attempt::Wait {
                    error: "host executor registered again and is not live yet; it is asked for the record of its stop first".into(),
                }),
                (RecordFirst::Rehost, _) => Plan::Outcome(Attempt::Rehost),
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

/// [`plan_step`] for a step whose instance is a cleanup-only one an earlier attempt
/// started (or a failed stop left for a fresh instance). One whose stop(true) was sent
/// but not confirmed (its step is RUNNING, or the control plane restarted) is stopped
/// again rather than another one started.
fn plan_rehosted(mode: DeletionMode, step: &CleanupStep, view: &ExecutorView) -> Plan {
    match (mode, step.state) {
        (
            DeletionMode::KeepResources,
            CleanupState::Pending
            | CleanupState::Running
            | CleanupState::Failed
            | CleanupState::Done
            | CleanupState::Skipped,
        ) => Plan::Outcome(Attempt::Done {
            executor: String::new(),
        }),
        (DeletionMode::Cleanup, CleanupState::Running) => {
            let epoch = registered(view, &step.executor).map_or(0, |(epoch, _)| epoch);
            match (
                view.host(Some(&step.executor), epoch),
                view.live(&step.executor),
            ) {
                (Host::Live, Some(exec)) => Plan::Stop {
                    exec: exec.clone(),
                    generation: step.generation,
                    mark_running: false,
                    epoch: None,
                },
                (Host::Unresponsive, _) => Plan::Outcome(Attempt::Wait {
                    error: "executor of the cleanup-only instance does not answer heartbeats"
                        .into(),
                }),
                // Registered again and awaiting its lease (Lost until it is granted): it
                // may hold the record of the stop already sent, as in ask_record_first.
                (Host::Lost, _)
                    if registration(view, &step.executor).is_some_and(|r| !r.marked_lost) =>
                {
                    Plan::Outcome(Attempt::Wait {
                        error: "executor of the cleanup-only instance registered again and is not live yet; its stop is asked for once it is".into(),
                    })
                }
                (Host::Live, None) | (Host::Lost, _) => Plan::Outcome(Attempt::Rehost),
            }
        }
        (
            DeletionMode::Cleanup,
            CleanupState::Pending
            | CleanupState::Failed
            | CleanupState::Done
            | CleanupState::Skipped,
        ) => Plan::Outcome(Attempt::Rehost),
    }
}

/// What a deleted unit that [`decide`] would re-host does first ([`ask_record_first`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecordFirst {
    /// Ask the recorded host, at the recorded epoch, for the record of its stop.
    Ask,
    /// The recorded host registered again but cannot be asked yet: ask it once it can.
    Wait,
    /// No record to ask for, or nobody left to hold it: re-host the cleanup.
    Rehost,
}

/// Whether a deleted unit that [`decide`] would re-host is first asked for at its
/// recorded host (docs/contract.md, "A completed stop is replayed"): when that executor
/// registered again since the instance was recorded (same id, a newer epoch, for
/// instance after fencing itself during a control-plane failover), it may hold the
/// record of the stop(true) already run there, whose answer was lost. The stop then goes
/// to it at the recorded epoch and generation: the executor answers from the record, or
/// refuses (nothing claimed there, or the record is gone) and the cleanup is re-hosted,
/// so a cleanup runs twice only where its record is gone (at least once).
///
/// It is asked only while live. Registered again but not live yet, it is waited for
/// rather than passed over: a registration is in the store before its identity probe
/// and its lease grant (Lost until then, for as long as the probe takes under load), and
/// a host silent at its new epoch is left to its lease (contract point 14). Re-hosting
/// then would run the cleanup a second time beside the record of the first. Only a new
/// epoch the store marked lost (its lease ran out) is given up on.
///
/// `hosted` is the recorded instance, `recorded_epoch` the epoch it was recorded under,
/// `now` the executor's current registration (`None`: not registered).
fn ask_record_first(hosted: Hosted, recorded_epoch: u64, now: Option<Registration>) -> RecordFirst {
    match hosted {
        // Nothing was started there, or its stop overran: no completed stop to replay.
        Hosted::Absent | Hosted::Abandoned => RecordFirst::Rehost,
        Hosted::Starting | Hosted::Running | Hosted::Failed | Hosted::Stopping => match now {
            None => RecordFirst::Rehost,
            // Not registered again: its lease at the recorded epoch ran out (or it was
            // forgotten) and nothing since says it is back.
            Some(r) if r.epoch <= recorded_epoch => RecordFirst::Rehost,
            Some(r) => match (r.health, r.marked_lost) {
                (Host::Live, true | false) => RecordFirst::Ask,
                (Host::Lost, true) => RecordFirst::Rehost,
                (Host::Lost, false) | (Host::Unresponsive, _) => RecordFirst::Wait,
            },
        },
    }
}

/// The executor a cleanup-only instance of a unit hosted at `preferred` starts on: a
/// live, placeable executor with `plugin`, the last host first (local state such as a
/// SQLite file lives there); `None` when there is none.
pub(super) fn cleanup_host<'a>(
    view: &'a ExecutorView,
    plugin: &str,
    preferred: Option<&str>,
) -> Option<&'a ExecutorRecord> {
    let placeable = |e: &&ExecutorRecord| e.has_plugin(plugin) && view.placeable.contains(&e.id);
    preferred
        .and_then(|e| view.live(e))
        .filter(placeable)
        .or_else(|| view.all.values().find(placeable))
}

/// Indexes of the steps to run at `now` (Unix milliseconds): every due task step, or the
/// connector step once all task steps are final (tasks are cleaned before the connector
/// instance).
pub(super) fn ready_steps(steps: &[CleanupStep], now: i64) -> Vec<usize> {
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

/// Whether a round of a deletion with `steps` has anything to do at `now` (Unix
/// milliseconds): a step is due, every step is final (the record is removed), or the
/// operator asked for a retry (`retry_requested`, carried out in this pass, so the
/// steps read before it may be stale).
pub(super) fn round_due(steps: &[CleanupStep], retry_requested: bool, now: i64) -> bool {
    retry_requested
        || steps.iter().all(|s| s.state.is_final())
        || !ready_steps(steps, now).is_empty()
}

/// A round's progress `ours` on top of `fresh`, the record as stored now, when the only
/// change since `base` (what the round read or last wrote) is the operator's retry
/// intent; `None` for any other change: a force (it skips what is left and finishes),
/// steps written by another writer (a replica that leads now), or another deletion of
/// the same name.
pub(super) fn carry_over(
    base: &DeletionRecord,
    ours: &DeletionRecord,
    fresh: &DeletionRecord,
) -> Option<DeletionRecord> {
    let same_deletion = fresh.requested_at_ms == base.requested_at_ms
        && fresh.sealed.incarnation == base.sealed.incarnation;
    let same_progress = fresh.mode == base.mode
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

/// Whether a recorded retry (`RetryCleanup`, or a second `DeleteConnector`) is carried out
/// in this pass: only when no round of the deletion is in flight. A round in flight runs
/// its stops and then writes their outcomes (and its RUNNING marks) conditionally on the
/// record's revision; a retry written under it would make those writes fail, so the status
/// would show the round's steps as they were before it until it had ended. Waiting costs
/// nothing: no new round of that deletion starts before the running one ends anyway, and
/// the retry then also covers what that round left failed.
pub(super) fn retry_now(retry_requested: bool, round_in_flight: bool) -> bool {
    match (retry_requested, round_in_flight) {
        (true, false) => true,
        (true, true) | (false, _) => false,
    }
}

/// Carries out a recorded retry on `d`: failed and waiting steps are due now, exhausted
/// ones get their attempts again. False when no retry is recorded (nothing changed).
pub(super) fn retry_steps(d: &mut DeletionRecord) -> bool {
    if !std::mem::replace(&mut d.retry_requested, false) {
        return false;
    }
    for s in &mut d.steps {
        if !s.state.is_final() {
            if s.state == CleanupState::Failed {
                s.state = CleanupState::Pending;
            }
            s.next_attempt_ms = 0;
            s.waits = 0;
        }
    }
    true
}

/// Carries out a recorded force on `d`: every step not yet final is skipped (marked
/// forced, no cleanup asked). Returns what it skipped now: task indexes, and whether the
/// connector instance's step was one.
pub(super) fn force_steps(d: &mut DeletionRecord) -> (Vec<u32>, bool) {
    let mut skipped = Vec::new();
    for s in &mut d.steps {
        if !s.state.is_final() {
            s.state = CleanupState::Skipped;
            s.connector_deleted = false;
            s.forced = true;
            skipped.push(&*s);
        }
    }
    units(skipped.into_iter())
}

/// What recording an attempt did to its step, for the loop to log and count (the
/// step's fields say the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StepEvent {
    /// The stop completed: the step is DONE (SKIPPED when resources are kept).
    Done,
    /// The instance is not where the record says: the next attempt runs cleanup-only.
    Rehost,
    /// A failed attempt, retried after its backoff.
    Failed,
    /// The last allowed attempt failed under `cleanup.policy = give-up`: SKIPPED.
    GivenUp,
    /// The last allowed attempt failed: FAILED until RetryCleanup or force.
    Exhausted,
    /// The step waits for an executor, retried in `retry_in_ms`; `changed` when it did
    /// not wait before or waits for another reason now (logged at INFO, else DEBUG).
    Waiting { retry_in_ms: i64, changed: bool },
}

impl StepEvent {
    /// The `outcome` label of [`crate::observe::CLEANUP_ATTEMPTS`] under `mode`; `None`
    /// for a wait, which is not an attempt.
    pub(super) fn counted(self, mode: DeletionMode) -> Option<&'static str> {
        match self {
            StepEvent::Done => match mode {
                DeletionMode::Cleanup => Some("done"),
                DeletionMode::KeepResources => Some("skipped"),
            },
            StepEvent::Rehost => Some("rehost"),
            StepEvent::Failed => Some("failed"),
            StepEvent::GivenUp => Some("given_up"),
            StepEvent::Exhausted => Some("exhausted"),
            StepEvent::Waiting { .. } => None,
        }
    }
}

/// Applies one attempt's outcome to step `idx` of `d` (state, attempts, error, backoff),
/// at `now_ms` (Unix milliseconds), with `jitter` in [0, 1] for the backoff of a wait.
/// Returns what happened, for the loop to log and count.
pub(super) fn record_outcome(
    d: &mut DeletionRecord,
    idx: usize,
    attempt: Attempt,
    now_ms: i64,
    jitter: f64,
) -> StepEvent {
    let mode = d.mode;
    let max = d.sealed.cleanup_max_attempts;
    let gives_up = d.sealed.gives_up;
    let s = &mut d.steps[idx];
    match attempt {
        Attempt::Done { executor } => {
            s.attempts += 1;
            s.state = match mode {
                DeletionMode::Cleanup => CleanupState::Done,
                DeletionMode::KeepResources => CleanupState::Skipped,
            };
            s.connector_deleted = mode.connector_deleted();
            if !executor.is_empty() {
                s.executor = executor;
            }
            s.last_error.clear();
            s.waits = 0;
            StepEvent::Done
        }
        Attempt::Rehost => {
            // The original instance is gone: the next attempt runs cleanup-only.
            s.rehosted = true;
            s.state = CleanupState::Pending;
            s.next_attempt_ms = 0;
            s.waits = 0;
            StepEvent::Rehost
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
            match (s.attempts >= max, gives_up) {
                (true, true) => {
                    s.state = CleanupState::Skipped;
                    StepEvent::GivenUp
                }
                (true, false) => {
                    s.state = CleanupState::Failed;
                    s.next_attempt_ms = i64::MAX;
                    StepEvent::Exhausted
                }
                (false, _) => {
                    s.state = CleanupState::Failed;
                    s.next_attempt_ms = now_ms + backoff_ms(s.attempts);
                    StepEvent::Failed
                }
            }
        }
        Attempt::Wait { error } => {
            // A step whose stop was sent stays RUNNING, so that the same instance is
            // stopped on the next attempt instead of a new one being started.
            if s.state != CleanupState::Running {
                s.state = CleanupState::Pending;
            }
            // Waiting retries back off like failed attempts.
            let changed = s.waits == 0 || s.last_error != error;
            s.waits = s.waits.saturating_add(1);
            s.last_error = error;
            let retry_in_ms = jittered_ms(wait_backoff_ms(s.waits), jitter);
            s.next_attempt_ms = now_ms + retry_in_ms;
            StepEvent::Waiting {
                retry_in_ms,
                changed,
            }
        }
    }
}

/// Which attempt a stop's answer is (asked in `asked`, `None` for a plain stop; sent to
/// `executor`, bounded by `timeout_ms`). One exhaustive decision over the answer:
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
pub(super) fn classify_stop(
    answer: Result<Stopped, CallError>,
    asked: Option<DeletionMode>,
    executor: &str,
    timeout_ms: u32,
) -> Attempt {
    let flag = asked.is_some_and(DeletionMode::connector_deleted);
    match answer {
        Ok(answer) if answer.connector_deleted != flag => Attempt::Rehost,
        Ok(Stopped {
            outcome: StopOutcome::Stopped,
            ..
        }) => Attempt::Done {
            executor: executor.to_owned(),
        },
        // The executor's texts are cut before they are stored in the step's last_error.
        Ok(Stopped {
            outcome: StopOutcome::Failed,
            error,
            abandoned,
            ..
        }) => Attempt::Failed {
            executor: executor.to_owned(),
            error: reported_error(error),
            abandoned,
        },
        Ok(Stopped {
            outcome: StopOutcome::TimedOut,
            error,
            abandoned,
            ..
        }) => Attempt::Failed {
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

/// Why what is left of a finished deletion's ledger outlives it, from its final record:
/// `keep_resources`, a force, or `cleanup.policy = give-up`; `None` when every step
/// completed its cleanup (nothing is left by design). Pure.
pub fn orphan_reason(d: &DeletionRecord) -> Option<crate::model::resources::OrphanReason> {
    use crate::model::resources::OrphanReason;
    match d.mode {
        DeletionMode::KeepResources => Some(OrphanReason::KeepResources),
        DeletionMode::Cleanup if d.steps.iter().any(|s| s.forced) => Some(OrphanReason::Force),
        DeletionMode::Cleanup if d.steps.iter().any(is_given_up) => Some(OrphanReason::GiveUp),
        DeletionMode::Cleanup => None,
    }
}

/// What a completed stop(true) of step `task` comes to once the ledger is read: still
/// done when every created entry its instance owns is released or found absent, else
/// failed naming the entries left (docs/resources.md, "A deletion ends with the ledger
/// accounted for"). Pure.
pub(super) fn accounted(
    attempt: Attempt,
    task: Option<u32>,
    ledger: &[crate::model::resources::LedgerEntry],
    incarnation: &str,
) -> Attempt {
    use crate::model::resources::{ResourceOwner, unaccounted, unaccounted_error};
    let Attempt::Done { executor } = attempt else {
        return attempt;
    };
    let owner = match task {
        Some(t) => ResourceOwner::Task(t),
        None => ResourceOwner::Connector,
    };
    let left = unaccounted(ledger, owner, incarnation);
    if left.is_empty() {
        Attempt::Done { executor }
    } else {
        Attempt::Failed {
            executor,
            error: unaccounted_error(&left),
            abandoned: false,
        }
    }
}

/// `steps` as task indexes and whether the connector instance's step is among them.
fn units<'a>(steps: impl Iterator<Item = &'a CleanupStep>) -> (Vec<u32>, bool) {
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
/// A deletion in `mode` of a connector `c1` of plugin `test-source` whose one task was
/// recorded as `task` (revision 0), for the tests below.
#[cfg(test)]
fn one_task_deletion(mode: DeletionMode, task: Instance) -> DeletionRecord {
    let spec = crate::model::ConnectorSpec {
        name: wharf::ids::ConnectorName::parse("c1").expect("name"),
        plugin: "test-source".into(),
        tasks_max: std::num::NonZeroU32::new(1).expect("one"),
        config: Default::default(),
    };
    let mut rec = crate::model::ConnectorRecord::new(&spec, crate::model::TargetState::Started);
    rec.tasks = vec![task];
    DeletionRecord::seal(&rec, vec![], mode, 1_000)
}

#[cfg(test)]
mod ledger_tests {
    use super::*;
    use crate::model::resources::{
        EntryState, LedgerEntry, Locator, OrphanReason, Resource, ResourceKind, ResourceOwner,
    };

    fn entry(owner: ResourceOwner, state: EntryState) -> LedgerEntry {
        LedgerEntry {
            resource: Resource::created(ResourceKind::Table, "t", Locator::default().path("/x")),
            owner,
            state,
            incarnation: "i1".into(),
            updated_at_ms: 0,
        }
    }

    fn done() -> Attempt {
        Attempt::Done {
            executor: "e1".into(),
        }
    }

    #[test]
    fn a_done_stop_whose_created_entries_are_released_stays_done() {
        let ledger = [entry(ResourceOwner::Connector, EntryState::Released)];
        assert!(matches!(
            accounted(done(), None, &ledger, "i1"),
            Attempt::Done { .. }
        ));
    }

    #[test]
    fn a_done_stop_that_left_a_created_entry_fails_naming_it() {
        let ledger = [entry(ResourceOwner::Connector, EntryState::Confirmed)];
        let Attempt::Failed {
            error,
            executor,
            abandoned,
        } = accounted(done(), None, &ledger, "i1")
        else {
            panic!("expected a failed attempt");
        };
        assert!(error.contains("table t (path=/x)"), "{error}");
        assert_eq!((executor.as_str(), abandoned), ("e1", false));
    }

    #[test]
    fn only_the_steps_own_entries_count() {
        let ledger = [entry(ResourceOwner::Task(1), EntryState::Confirmed)];
        assert!(matches!(
            accounted(done(), Some(0), &ledger, "i1"),
            Attempt::Done { .. }
        ));
        assert!(matches!(
            accounted(done(), Some(1), &ledger, "i1"),
            Attempt::Failed { .. }
        ));
    }

    #[test]
    fn an_attempt_that_is_not_done_is_left_as_it_is() {
        let ledger = [entry(ResourceOwner::Connector, EntryState::Confirmed)];
        assert!(matches!(
            accounted(Attempt::Rehost, None, &ledger, "i1"),
            Attempt::Rehost
        ));
    }

    #[test]
    fn orphans_are_kept_for_keep_resources_force_and_give_up_only() {
        let mut d = one_task_deletion(DeletionMode::KeepResources, Instance::unassigned());
        assert_eq!(orphan_reason(&d), Some(OrphanReason::KeepResources));
        d.mode = DeletionMode::Cleanup;
        d.steps[0].connector_deleted = true;
        assert_eq!(orphan_reason(&d), None);
        d.steps[0].state = CleanupState::Skipped;
        assert_eq!(orphan_reason(&d), Some(OrphanReason::GiveUp));
        d.steps[0].forced = true;
        assert_eq!(orphan_reason(&d), Some(OrphanReason::Force));
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
        let mut d = one_task_deletion(DeletionMode::Cleanup, Instance::unassigned());
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

    /// The attempt an answer (outcome, flag it ran with, error "boom", abandoned) to a
    /// stop(true) is.
    fn answered(outcome: StopOutcome, deleted: bool, abandoned: bool) -> Attempt {
        classify_stop(
            Ok(Stopped {
                outcome,
                connector_deleted: deleted,
                error: "boom".into(),
                abandoned,
            }),
            Some(DeletionMode::Cleanup),
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
        classify_stop(Err(e), Some(DeletionMode::Cleanup), "e1", 500)
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
            Ok(Stopped {
                outcome: StopOutcome::Failed,
                connector_deleted: true,
                error: "e".repeat(3_000_000),
                abandoned: false,
            }),
            Some(DeletionMode::Cleanup),
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
            classify_stop(Err(e), Some(DeletionMode::Cleanup), "e1", 500),
            Attempt::Wait { .. }
        ));
    }

    /// The host's registration now: at `epoch`, `health`, not marked lost.
    fn now(epoch: u64, health: Host) -> Option<Registration> {
        Some(Registration {
            epoch,
            health,
            marked_lost: false,
        })
    }

    #[test]
    fn a_host_that_registered_again_is_asked_for_the_record_of_the_stop() {
        for hosted in [
            Hosted::Starting,
            Hosted::Running,
            Hosted::Failed,
            Hosted::Stopping,
        ] {
            assert_eq!(
                ask_record_first(hosted, RECORDED, now(RECORDED + 1, Host::Live)),
                RecordFirst::Ask
            );
        }
    }

    #[test]
    fn a_unit_never_started_is_re_hosted_without_asking() {
        assert_eq!(
            ask_record_first(Hosted::Absent, RECORDED, now(RECORDED + 1, Host::Live)),
            RecordFirst::Rehost
        );
    }

    #[test]
    fn an_abandoned_instance_is_re_hosted_without_asking() {
        assert_eq!(
            ask_record_first(Hosted::Abandoned, RECORDED, now(RECORDED + 1, Host::Live)),
            RecordFirst::Rehost
        );
    }

    #[test]
    fn a_host_that_is_not_registered_is_not_asked() {
        assert_eq!(
            ask_record_first(Hosted::Running, RECORDED, None),
            RecordFirst::Rehost
        );
    }

    #[test]
    fn a_host_whose_lease_ran_out_at_the_recorded_epoch_is_not_asked() {
        assert_eq!(
            ask_record_first(Hosted::Running, RECORDED, now(RECORDED, Host::Lost)),
            RecordFirst::Rehost
        );
    }

    #[test]
    fn a_host_registered_again_but_silent_is_waited_for() {
        assert_eq!(
            ask_record_first(
                Hosted::Running,
                RECORDED,
                now(RECORDED + 1, Host::Unresponsive)
            ),
            RecordFirst::Wait
        );
    }

    #[test]
    fn a_host_registered_again_whose_lease_is_not_granted_yet_is_waited_for() {
        // In the store at its new epoch, its identity probe still running: no lease yet.
        assert_eq!(
            ask_record_first(Hosted::Running, RECORDED, now(RECORDED + 1, Host::Lost)),
            RecordFirst::Wait
        );
    }

    #[test]
    fn a_host_registered_again_and_lost_again_is_not_asked() {
        let lost_again = Registration {
            epoch: RECORDED + 1,
            health: Host::Lost,
            marked_lost: true,
        };
        assert_eq!(
            ask_record_first(Hosted::Running, RECORDED, Some(lost_again)),
            RecordFirst::Rehost
        );
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

#[cfg(test)]
mod plan_tests {
    use super::*;
    use crate::model::{InstanceState, PluginKind, PluginRecord};

    const RECORDED: u64 = 4;
    const GENERATION: u64 = 9;

    fn exec(id: &str, epoch: u64) -> ExecutorRecord {
        ExecutorRecord {
            id: id.into(),
            address: format!("http://{id}"),
            epoch,
            plugins: vec![PluginRecord {
                name: "test-source".into(),
                kind: PluginKind::Source,
                info: Vec::new(),
            }],
            lost: false,
            record_log: String::new(),
            transforms: Vec::new(),
        }
    }

    /// A snapshot of the executors `(id, epoch, health)`; the live ones are placeable.
    fn view(executors: &[(&str, u64, Host)]) -> ExecutorView {
        let mut v = ExecutorView::default();
        for &(id, epoch, health) in executors {
            v.all.insert(id.into(), exec(id, epoch));
            v.health.insert(id.into(), health);
            if health == Host::Live {
                v.placeable.insert(id.into());
            }
        }
        v
    }

    /// A deletion in `mode` of one task recorded in `state` on e1 at the recorded epoch
    /// (unassigned when `state` is UNASSIGNED).
    fn deletion(mode: DeletionMode, state: InstanceState) -> DeletionRecord {
        let assigned = state != InstanceState::Unassigned;
        let task = Instance {
            executor: assigned.then(|| "e1".to_owned()),
            epoch: RECORDED,
            generation: GENERATION,
            state,
            error: String::new(),
            restart: false,
        };
        one_task_deletion(mode, task)
    }

    /// `d` with its task step re-hosted to a cleanup-only instance on e2 (generation 12),
    /// in `state`.
    fn rehosted(mut d: DeletionRecord, state: CleanupState) -> DeletionRecord {
        let s = &mut d.steps[0];
        s.rehosted = true;
        s.executor = "e2".into();
        s.generation = 12;
        s.state = state;
        d
    }

    fn is_stop(plan: &Plan, executor: &str, generation: u64, mark: bool, at: Option<u64>) -> bool {
        matches!(plan, Plan::Stop { exec, generation: g, mark_running, epoch }
            if exec.id == executor && *g == generation && *mark_running == mark && *epoch == at)
    }

    #[test]
    fn a_running_instance_on_a_live_host_is_stopped_where_it_runs_in_either_mode() {
        for mode in [DeletionMode::Cleanup, DeletionMode::KeepResources] {
            let d = deletion(mode, InstanceState::Running);
            let plan = plan_step(&d, 0, &view(&[("e1", RECORDED, Host::Live)]));
            assert!(
                is_stop(&plan, "e1", GENERATION, true, None),
                "{mode:?}: {plan:?}"
            );
        }
    }

    #[test]
    fn an_instance_on_a_silent_host_waits_for_it_or_its_lease() {
        let d = deletion(DeletionMode::Cleanup, InstanceState::Running);
        let plan = plan_step(&d, 0, &view(&[("e1", RECORDED, Host::Unresponsive)]));
        assert!(
            matches!(plan, Plan::Outcome(Attempt::Wait { .. })),
            "{plan:?}"
        );
    }

    #[test]
    fn an_instance_whose_host_registered_again_is_asked_at_the_recorded_epoch() {
        let d = deletion(DeletionMode::Cleanup, InstanceState::Running);
        let plan = plan_step(&d, 0, &view(&[("e1", RECORDED + 1, Host::Live)]));
        assert!(
            is_stop(&plan, "e1", GENERATION, true, Some(RECORDED)),
            "{plan:?}"
        );
    }

    #[test]
    fn an_instance_whose_host_registered_again_and_awaits_its_lease_waits_for_it() {
        // Its new epoch is in the store, its lease not granted yet (no health but Lost),
        // while another executor is live: the cleanup is not moved there.
        let d = deletion(DeletionMode::Cleanup, InstanceState::Running);
        let plan = plan_step(
            &d,
            0,
            &view(&[("e1", RECORDED + 1, Host::Lost), ("e2", 1, Host::Live)]),
        );
        assert!(
            matches!(plan, Plan::Outcome(Attempt::Wait { .. })),
            "{plan:?}"
        );
    }

    #[test]
    fn an_instance_whose_host_registered_again_and_was_lost_again_is_re_hosted() {
        let d = deletion(DeletionMode::Cleanup, InstanceState::Running);
        let mut v = view(&[("e1", RECORDED + 1, Host::Lost), ("e2", 1, Host::Live)]);
        if let Some(e1) = v.all.get_mut("e1") {
            e1.lost = true;
        }
        let plan = plan_step(&d, 0, &v);
        assert!(matches!(plan, Plan::Outcome(Attempt::Rehost)), "{plan:?}");
    }

    #[test]
    fn an_instance_whose_host_is_gone_is_re_hosted() {
        let d = deletion(DeletionMode::Cleanup, InstanceState::Running);
        let plan = plan_step(&d, 0, &view(&[("e2", 1, Host::Live)]));
        assert!(matches!(plan, Plan::Outcome(Attempt::Rehost)), "{plan:?}");
    }

    #[test]
    fn a_unit_never_started_is_re_hosted() {
        let d = deletion(DeletionMode::Cleanup, InstanceState::Unassigned);
        let plan = plan_step(&d, 0, &view(&[("e1", RECORDED, Host::Live)]));
        assert!(matches!(plan, Plan::Outcome(Attempt::Rehost)), "{plan:?}");
    }

    #[test]
    fn a_unit_never_started_that_keeps_its_resources_is_done_without_a_call() {
        let d = deletion(DeletionMode::KeepResources, InstanceState::Unassigned);
        let plan = plan_step(&d, 0, &view(&[("e1", RECORDED, Host::Live)]));
        assert!(
            matches!(plan, Plan::Outcome(Attempt::Done { .. })),
            "{plan:?}"
        );
    }

    #[test]
    fn a_kept_instance_whose_host_is_gone_is_done_without_a_call() {
        let d = deletion(DeletionMode::KeepResources, InstanceState::Running);
        let plan = plan_step(&d, 0, &ExecutorView::default());
        assert!(
            matches!(plan, Plan::Outcome(Attempt::Done { .. })),
            "{plan:?}"
        );
    }

    #[test]
    fn a_cleanup_only_instance_whose_stop_was_not_confirmed_is_stopped_again() {
        let d = rehosted(
            deletion(DeletionMode::Cleanup, InstanceState::Running),
            CleanupState::Running,
        );
        let plan = plan_step(&d, 0, &view(&[("e2", 1, Host::Live)]));
        assert!(is_stop(&plan, "e2", 12, false, None), "{plan:?}");
    }

    #[test]
    fn a_cleanup_only_instance_on_a_silent_host_waits() {
        let d = rehosted(
            deletion(DeletionMode::Cleanup, InstanceState::Running),
            CleanupState::Running,
        );
        let plan = plan_step(&d, 0, &view(&[("e2", 1, Host::Unresponsive)]));
        assert!(
            matches!(plan, Plan::Outcome(Attempt::Wait { .. })),
            "{plan:?}"
        );
    }

    #[test]
    fn a_cleanup_only_instance_whose_host_registered_again_and_awaits_its_lease_waits() {
        let d = rehosted(
            deletion(DeletionMode::Cleanup, InstanceState::Running),
            CleanupState::Running,
        );
        let plan = plan_step(
            &d,
            0,
            &view(&[("e2", 2, Host::Lost), ("e1", 1, Host::Live)]),
        );
        assert!(
            matches!(plan, Plan::Outcome(Attempt::Wait { .. })),
            "{plan:?}"
        );
    }

    #[test]
    fn a_cleanup_only_instance_whose_host_was_marked_lost_is_re_hosted_again() {
        let d = rehosted(
            deletion(DeletionMode::Cleanup, InstanceState::Running),
            CleanupState::Running,
        );
        let mut v = view(&[("e2", 2, Host::Lost), ("e1", 1, Host::Live)]);
        if let Some(e2) = v.all.get_mut("e2") {
            e2.lost = true;
        }
        let plan = plan_step(&d, 0, &v);
        assert!(matches!(plan, Plan::Outcome(Attempt::Rehost)), "{plan:?}");
    }

    #[test]
    fn a_cleanup_only_instance_whose_host_is_gone_is_re_hosted_again() {
        let d = rehosted(
            deletion(DeletionMode::Cleanup, InstanceState::Running),
            CleanupState::Running,
        );
        let plan = plan_step(&d, 0, &view(&[("e1", RECORDED, Host::Live)]));
        assert!(matches!(plan, Plan::Outcome(Attempt::Rehost)), "{plan:?}");
    }

    #[test]
    fn a_re_hosted_step_not_yet_running_starts_a_cleanup_only_instance() {
        for state in [CleanupState::Pending, CleanupState::Failed] {
            let d = rehosted(
                deletion(DeletionMode::Cleanup, InstanceState::Running),
                state,
            );
            let plan = plan_step(&d, 0, &view(&[("e2", 1, Host::Live)]));
            assert!(
                matches!(plan, Plan::Outcome(Attempt::Rehost)),
                "{state:?}: {plan:?}"
            );
        }
    }

    #[test]
    fn a_re_hosted_step_that_keeps_resources_is_done_without_a_call() {
        let d = rehosted(
            deletion(DeletionMode::KeepResources, InstanceState::Running),
            CleanupState::Running,
        );
        let plan = plan_step(&d, 0, &view(&[("e2", 1, Host::Live)]));
        assert!(
            matches!(plan, Plan::Outcome(Attempt::Done { .. })),
            "{plan:?}"
        );
    }

    #[test]
    fn a_cleanup_only_instance_goes_to_the_last_host_when_it_can() {
        let v = view(&[("e1", 1, Host::Live), ("e2", 1, Host::Live)]);
        let chosen = cleanup_host(&v, "test-source", Some("e2")).map(|e| e.id.as_str());
        assert_eq!(chosen, Some("e2"));
    }

    #[test]
    fn a_cleanup_only_instance_goes_elsewhere_when_the_last_host_is_gone() {
        let v = view(&[("e1", 1, Host::Live), ("e2", 1, Host::Lost)]);
        let chosen = cleanup_host(&v, "test-source", Some("e2")).map(|e| e.id.as_str());
        assert_eq!(chosen, Some("e1"));
    }

    #[test]
    fn no_cleanup_only_instance_without_a_live_executor_with_the_plugin() {
        let v = view(&[("e1", 1, Host::Unresponsive)]);
        assert!(cleanup_host(&v, "test-source", None).is_none());
        let v = view(&[("e1", 1, Host::Live)]);
        assert!(cleanup_host(&v, "other-plugin", Some("e1")).is_none());
    }
}

#[cfg(test)]
mod record_tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    /// A deletion in `mode` of one unassigned task, at most 3 attempts per step.
    fn deletion(mode: DeletionMode, gives_up: bool) -> DeletionRecord {
        let mut d = one_task_deletion(mode, Instance::unassigned());
        d.sealed.cleanup_max_attempts = 3;
        d.sealed.gives_up = gives_up;
        d
    }

    fn failed(abandoned: bool) -> Attempt {
        Attempt::Failed {
            executor: "e1".into(),
            error: "boom".into(),
            abandoned,
        }
    }

    fn wait(error: &str) -> Attempt {
        Attempt::Wait {
            error: error.into(),
        }
    }

    #[test]
    fn a_completed_stop_marks_the_step_done_and_clears_its_error() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        d.steps[0].last_error = "earlier".into();
        d.steps[0].waits = 2;
        let attempt = Attempt::Done {
            executor: "e1".into(),
        };
        let event = record_outcome(&mut d, 0, attempt, NOW, 0.5);
        assert_eq!(event, StepEvent::Done);
        assert_eq!(event.counted(d.mode), Some("done"));
        let s = &d.steps[0];
        assert_eq!(s.state, CleanupState::Done);
        assert!(s.connector_deleted);
        assert_eq!((s.attempts, s.waits, s.executor.as_str()), (1, 0, "e1"));
        assert!(s.last_error.is_empty());
    }

    #[test]
    fn a_completed_stop_that_keeps_resources_skips_the_step_with_false() {
        let mut d = deletion(DeletionMode::KeepResources, false);
        let attempt = Attempt::Done {
            executor: String::new(),
        };
        let event = record_outcome(&mut d, 0, attempt, NOW, 0.5);
        assert_eq!(event.counted(d.mode), Some("skipped"));
        let s = &d.steps[0];
        assert_eq!(s.state, CleanupState::Skipped);
        assert!(!s.connector_deleted);
        assert_eq!(
            s.executor, "",
            "no executor answered: the recorded one stays"
        );
    }

    #[test]
    fn a_stop_that_found_no_instance_makes_the_next_attempt_run_cleanup_only_now() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        d.steps[0].next_attempt_ms = NOW + 5;
        let event = record_outcome(&mut d, 0, Attempt::Rehost, NOW, 0.5);
        assert_eq!(event, StepEvent::Rehost);
        assert_eq!(event.counted(d.mode), Some("rehost"));
        let s = &d.steps[0];
        assert!(s.rehosted);
        assert_eq!(
            (s.state, s.next_attempt_ms, s.attempts),
            (CleanupState::Pending, 0, 0)
        );
    }

    #[test]
    fn a_failed_stop_under_the_attempt_limit_is_retried_after_backoff() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        let event = record_outcome(&mut d, 0, failed(false), NOW, 0.5);
        assert_eq!(event, StepEvent::Failed);
        assert_eq!(event.counted(d.mode), Some("failed"));
        let s = &d.steps[0];
        assert_eq!(s.state, CleanupState::Failed);
        assert_eq!(s.attempts, 1);
        assert_eq!(s.next_attempt_ms, NOW + CLEANUP_BACKOFF_BASE_MS * 2);
        assert_eq!((s.executor.as_str(), s.last_error.as_str()), ("e1", "boom"));
        assert!(s.rehosted, "the next attempt starts a fresh instance");
        assert!(s.abandoned.is_empty());
    }

    #[test]
    fn a_failed_stop_of_an_abandoned_instance_is_named_in_the_step() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        d.steps[0].generation = 7;
        record_outcome(&mut d, 0, failed(true), NOW, 0.5);
        assert_eq!(d.steps[0].abandoned, vec!["generation 7 on e1".to_owned()]);
    }

    #[test]
    fn a_failed_stop_at_the_attempt_limit_fails_the_step_until_retried_or_forced() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        d.steps[0].attempts = 2;
        let event = record_outcome(&mut d, 0, failed(false), NOW, 0.5);
        assert_eq!(event, StepEvent::Exhausted);
        assert_eq!(event.counted(d.mode), Some("exhausted"));
        assert!(d.steps[0].exhausted());
    }

    #[test]
    fn a_failed_stop_at_the_attempt_limit_under_give_up_skips_the_step() {
        let mut d = deletion(DeletionMode::Cleanup, true);
        d.steps[0].attempts = 2;
        let event = record_outcome(&mut d, 0, failed(false), NOW, 0.5);
        assert_eq!(event, StepEvent::GivenUp);
        assert_eq!(event.counted(d.mode), Some("given_up"));
        assert_eq!(d.steps[0].state, CleanupState::Skipped);
        assert!(is_given_up(&d.steps[0]));
    }

    #[test]
    fn a_wait_is_retried_after_a_jittered_backoff_without_counting_an_attempt() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        let event = record_outcome(&mut d, 0, wait("no answer"), NOW, 1.0);
        let retry_in_ms = CLEANUP_BACKOFF_BASE_MS;
        assert_eq!(
            event,
            StepEvent::Waiting {
                retry_in_ms,
                changed: true
            }
        );
        assert_eq!(event.counted(d.mode), None);
        let s = &d.steps[0];
        assert_eq!(
            (s.state, s.attempts, s.waits),
            (CleanupState::Pending, 0, 1)
        );
        assert_eq!(s.next_attempt_ms, NOW + retry_in_ms);
        let event = record_outcome(&mut d, 0, wait("no answer"), NOW, 0.0);
        assert_eq!(
            event,
            StepEvent::Waiting {
                retry_in_ms: CLEANUP_BACKOFF_BASE_MS,
                changed: false
            },
            "the second wait doubles the delay, half of it jittered away"
        );
    }

    #[test]
    fn a_wait_for_another_reason_is_a_change() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        record_outcome(&mut d, 0, wait("no answer"), NOW, 0.0);
        let event = record_outcome(&mut d, 0, wait("no live executor"), NOW, 0.0);
        assert!(
            matches!(event, StepEvent::Waiting { changed: true, .. }),
            "{event:?}"
        );
    }

    #[test]
    fn a_wait_keeps_a_step_whose_stop_was_sent_running() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        d.steps[0].state = CleanupState::Running;
        record_outcome(&mut d, 0, wait("no answer"), NOW, 0.0);
        assert_eq!(d.steps[0].state, CleanupState::Running);
    }

    #[test]
    fn a_retry_makes_failed_and_waiting_steps_due_now() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        assert!(!retry_steps(&mut d), "no retry recorded: nothing changes");
        d.retry_requested = true;
        d.steps[0].state = CleanupState::Failed;
        d.steps[0].next_attempt_ms = i64::MAX;
        d.steps[1].waits = 3;
        d.steps[1].next_attempt_ms = NOW;
        assert!(retry_steps(&mut d));
        assert!(!d.retry_requested);
        assert_eq!(
            (d.steps[0].state, d.steps[0].next_attempt_ms),
            (CleanupState::Pending, 0)
        );
        assert_eq!((d.steps[1].waits, d.steps[1].next_attempt_ms), (0, 0));
    }

    #[test]
    fn a_force_skips_what_is_not_final_and_says_what() {
        let mut d = deletion(DeletionMode::Cleanup, false);
        d.steps[0].state = CleanupState::Done;
        let (tasks, connector) = force_steps(&mut d);
        assert_eq!((tasks, connector), (vec![], true));
        assert_eq!(d.steps[0].state, CleanupState::Done);
        assert!(d.steps[1].forced && !d.steps[1].connector_deleted);
        assert_eq!(d.steps[1].state, CleanupState::Skipped);
        assert_eq!(forced_skips(&d), (vec![], true));
    }
}
