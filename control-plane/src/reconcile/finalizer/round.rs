//! One round of a deletion, the finalizer's I/O: the planned stops sent in parallel,
//! cleanup-only instances started where an instance is not where the record says, and
//! each executor's answer turned into an [`Attempt`] ([`step::classify_stop`]).
//!
//! What it reads of the executors: the [`ExecutorView`] snapshot the round was planned
//! on, and of the cluster `clients` (the calls), `lease_lost` / `lease_lost_at_every_epoch`
//! (to abandon a call to a fenced host) and `note_reach` (what a call says of its host).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::super::client::{CallError, ConnectorStart, StopCall, TaskStart};
use super::super::cluster::{CallKind, Cluster, ExecutorView, HerderError};
use super::step::{self, Attempt, Plan, plan_step};
use super::{RUNNING_MARK_AFTER_MS, save};
use crate::model::{CleanupState, DeletionMode, DeletionRecord, ExecutorRecord};

/// Runs one round: the planned stops in parallel, then, for the instances that are not
/// where the record says, fresh cleanup-only instances (their generations written first).
/// `base` is the record as stored when last read or written ([`save`]). Returns each
/// ready step's outcome, or None when the record changed underneath.
pub(super) async fn run_round(
    cluster: &Cluster,
    base: &mut DeletionRecord,
    d: &mut DeletionRecord,
    ready: &[usize],
    view: &ExecutorView,
    forced: &CancellationToken,
) -> Result<Option<Vec<(usize, Attempt)>>, HerderError> {
    let mode = d.mode;
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
                let attempt =
                    stop(cluster, record, task, exec, *generation, Some(mode), *epoch).await;
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

    // Instances that are not where the record says: start cleanup-only ones
    // ([`step::cleanup_host`]).
    let mut starts = Vec::new();
    for (idx, attempt) in &mut outcomes {
        match (mode, &*attempt) {
            (DeletionMode::Cleanup, Attempt::Rehost) => {}
            (
                DeletionMode::KeepResources,
                Attempt::Done { .. }
                | Attempt::Rehost
                | Attempt::Failed { .. }
                | Attempt::Wait { .. },
            )
            | (
                DeletionMode::Cleanup,
                Attempt::Done { .. } | Attempt::Failed { .. } | Attempt::Wait { .. },
            ) => continue,
        }
        let host = step::host_of(d, d.steps[*idx].task);
        let exec = step::cleanup_host(view, &d.sealed.plugin, host.executor.as_deref()).cloned();
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
    // A cleanup is done only with its instance's ledger accounted for: the plugin's
    // releases were stored before its stop answered.
    if mode == DeletionMode::Cleanup
        && outcomes
            .iter()
            .any(|(_, a)| matches!(a, Attempt::Done { .. }))
        && let Some(rec) = cluster.store.connector(&d.name)?
        && !rec.resources.is_empty()
    {
        for (idx, attempt) in &mut outcomes {
            let taken = std::mem::replace(attempt, Attempt::Rehost);
            *attempt = step::accounted(
                taken,
                d.steps[*idx].task,
                &rec.resources,
                &d.sealed.incarnation,
            );
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
            super::super::fault::crash_point("mid_fanout");
        }
        out.push((idx, attempt));
    }
    out
}

/// Starts a cleanup-only instance at `generation` on `exec`, then stops it with `true`.
pub(super) async fn start_then_stop(
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
        Ok(()) => match stop(
            cluster,
            d,
            task,
            exec,
            generation,
            Some(DeletionMode::Cleanup),
            None,
        )
        .await
        {
            Attempt::Rehost => Attempt::Failed {
                executor: exec.id.clone(),
                error: "cleanup-only instance was not found at stop".into(),
                abandoned: false,
            },
            other => other,
        },
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
                partition_share: None,
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

/// Sends the stop of a deletion in `deletion`'s mode (`None`: a plain stop, for what a
/// force skipped) under `epoch` when not `exec`'s current one, and classifies the answer.
pub(super) async fn stop(
    cluster: &Cluster,
    d: &DeletionRecord,
    task: Option<u32>,
    exec: &ExecutorRecord,
    generation: u64,
    deletion: Option<DeletionMode>,
    epoch: Option<u64>,
) -> Attempt {
    let timeout_ms = d.sealed.cleanup_timeout_ms;
    // A task's deletion stop names the topics it created (KIP-158) that the ledger still
    // holds, read from the live ledger (releases land there), else the sealed copy.
    let created_topics = match (task, deletion.is_some_and(DeletionMode::connector_deleted)) {
        (Some(t), true) => {
            let live = cluster.store.connector(&d.name).ok().flatten();
            let ledger = live.as_ref().map_or(&d.sealed.resources, |r| &r.resources);
            crate::model::topics::created_topics_of(ledger, t, &d.sealed.incarnation)
        }
        (Some(_) | None, _) => Vec::new(),
    };
    let request = StopCall {
        connector: d.name.clone(),
        task,
        generation,
        deletion,
        timeout_ms,
        incarnation: d.sealed.incarnation.clone(),
        executor_epoch: epoch,
        created_topics,
    };
    let call = cluster.clients.stop_on(exec, &request);
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
    let flag = request.connector_deleted();
    if matches!(&result, Err(e) if e.code().is_none()) {
        debug!(connector = %d.name, task = task, generation, executor = %exec.id, connector_deleted = flag,
            result = ?result.as_ref().map(|r| r.outcome), "cleanup stop sent; no answer");
    } else {
        info!(connector = %d.name, task = task, generation, executor = %exec.id, connector_deleted = flag,
            result = ?result.as_ref().map(|r| r.outcome), "cleanup stop sent");
    }
    step::classify_stop(result, deletion, &exec.id, timeout_ms)
}
