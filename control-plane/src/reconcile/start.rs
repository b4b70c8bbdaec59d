//! The one start path of the herder: the connector instance, or any number of tasks of one
//! connector at once. Every start is recorded before it is sent (executor, epoch, new
//! generation, state RESTARTING), so that a deletion sealed at any moment knows where an
//! instance may run; the answers are recorded in one more write.

use tracing::{info, warn};

use super::client::{CallError, ConnectorStart, Started, TaskStart};
use super::cluster::{CallKind, Cluster, ExecutorView, HerderError};
use crate::model::{
    ExecutorRecord, InstanceEvent, InstanceOf, InstanceState, TargetState, reported_error,
};
use crate::plan::partitions::share_of;

/// A start recorded as intent and to be sent.
struct Send {
    /// Task index; `None` for the connector instance.
    task: Option<usize>,
    generation: u64,
    exec: ExecutorRecord,
    task_config: wharf::sdk::ConfigMap,
}

/// How a start ended, for the record: `None` when its outcome is unknown (no answer, or
/// the executor is between epochs): the unit stays RESTARTING and a later pass starts it
/// again with a new generation, which fences whatever this call left behind.
fn outcome(result: Result<Started, CallError>) -> Option<(InstanceEvent, String)> {
    match result {
        Ok(Started::Running) => Some((InstanceEvent::Started, String::new())),
        Ok(Started::Failed(error)) => Some((InstanceEvent::Failed, reported_error(error))),
        Err(
            CallError::Unreachable { .. }
            | CallError::Refused {
                code: tonic::Code::FailedPrecondition | tonic::Code::NotFound,
                ..
            },
        ) => None,
        Err(e @ CallError::Refused { .. }) => {
            Some((InstanceEvent::Failed, reported_error(e.to_string())))
        }
    }
}

/// What the intent write leaves to send: the starts, and what every start of the
/// connector carries.
struct Intent {
    sends: Vec<Send>,
    target: TargetState,
    config: wharf::sdk::ConfigMap,
    incarnation: String,
    /// How many task configs the connector has (every task's share counts them).
    tasks: usize,
}

/// One start's answer to record: task index (`None`: the connector instance), the
/// generation it was sent at, and how it ended ([`outcome`]).
type Answer = (Option<usize>, u64, InstanceEvent, String);

/// Starts units of connector `name`: `starts` lists each unit (task index, or `None` for
/// the connector instance) and the executor the placement chose (`None`: nowhere to run,
/// recorded unassigned once). One write records every intent, the starts go out together
/// (task starts bounded over all connectors), one write records every answer.
///
/// # Errors
/// Store failures; a failed call is recorded or retried, never an error.
pub async fn start_units(
    cluster: &Cluster,
    name: &str,
    starts: &[(Option<usize>, Option<String>)],
    view: &ExecutorView,
) -> Result<(), HerderError> {
    if starts.is_empty() {
        return Ok(());
    }
    let Some(intent) = record_intents(cluster, name, starts, view).await? else {
        return Ok(());
    };
    if intent.sends.is_empty() {
        return Ok(());
    }
    let answers = send_starts(cluster, name, &intent).await?;
    if answers.is_empty() {
        return Ok(());
    }
    record_answers(cluster, name, &answers).await
}

/// Records every start as intent in one write (executor, epoch, new generation, state
/// RESTARTING; a unit with nowhere to run is recorded unassigned, once). `None` when
/// nothing was written.
async fn record_intents(
    cluster: &Cluster,
    name: &str,
    starts: &[(Option<usize>, Option<String>)],
    view: &ExecutorView,
) -> Result<Option<Intent>, HerderError> {
    cluster
        .modify_connector_batched(name, |r| {
            if r.deleting {
                return None;
            }
            let mut sends = Vec::new();
            let mut wrote = false;
            for (unit, to) in starts {
                let exec = to.as_ref().and_then(|id| view.live(id));
                let task_config = match unit {
                    Some(i) => r.task_configs.get(*i)?.clone(),
                    None => wharf::sdk::ConfigMap::new(),
                };
                let cur = match unit {
                    Some(i) => r.tasks.get(*i)?,
                    None => &r.connector,
                };
                if exec.is_none()
                    && cur.executor.is_none()
                    && cur.state == InstanceState::Unassigned
                    && !cur.restart
                {
                    // Nowhere to run: record it unassigned once, not on every pass.
                    continue;
                }
                let generation = r.take_generation();
                let cur = match unit {
                    Some(i) => r.tasks.get_mut(*i)?,
                    None => &mut r.connector,
                };
                cur.generation = generation;
                cur.restart = false;
                wrote = true;
                match exec {
                    Some(e) => {
                        cur.executor = Some(e.id.clone());
                        cur.epoch = e.epoch;
                        cur.state = InstanceState::Restarting;
                        cur.error.clear();
                        sends.push(Send {
                            task: *unit,
                            generation,
                            exec: e.clone(),
                            task_config,
                        });
                    }
                    None => {
                        cur.executor = None;
                        cur.epoch = 0;
                        cur.state = cur.state.on(InstanceEvent::Unassigned);
                    }
                }
                if unit.is_none() {
                    r.config_changed = false;
                }
            }
            wrote.then(|| Intent {
                sends,
                target: r.target,
                config: r.config.clone(),
                incarnation: r.incarnation.clone(),
                tasks: r.task_configs.len(),
            })
        })
        .await
}

/// Sends the recorded starts together (task starts bounded over all connectors) and
/// returns the answers whose outcome is known.
async fn send_starts(
    cluster: &Cluster,
    name: &str,
    intent: &Intent,
) -> Result<Vec<Answer>, HerderError> {
    // Tasks of a PAUSED connector are not started; the connector instance runs.
    let paused = match intent.target {
        TargetState::Paused => true,
        TargetState::Started | TargetState::Stopped => false,
    };
    let offsets = if intent.sends.iter().any(|s| s.task.is_some()) {
        cluster.store.offsets(name)?
    } else {
        Vec::new()
    };
    let calls = intent.sends.iter().map(|s| {
        let offsets = &offsets;
        async move {
            let result = match s.task {
                None => {
                    let start = ConnectorStart {
                        connector: name.to_owned(),
                        config: intent.config.clone(),
                        generation: s.generation,
                        paused,
                        cleanup_only: false,
                        incarnation: intent.incarnation.clone(),
                    };
                    cluster
                        .call(
                            &s.exec,
                            CallKind::Start,
                            cluster.clients.start_connector_on(&s.exec, &start),
                        )
                        .await
                }
                Some(t) => {
                    let start = TaskStart {
                        connector: name.to_owned(),
                        task: t as u32,
                        connector_config: intent.config.clone(),
                        task_config: s.task_config.clone(),
                        generation: s.generation,
                        paused,
                        cleanup_only: false,
                        offsets: offsets.clone(),
                        incarnation: intent.incarnation.clone(),
                        partition_share: share_of(t as u32, intent.tasks),
                    };
                    // Never closed; without a permit the start goes out anyway.
                    let _permit = cluster.task_starts.acquire().await.ok();
                    cluster
                        .call(
                            &s.exec,
                            CallKind::Start,
                            cluster.clients.start_task_on(&s.exec, &start),
                        )
                        .await
                }
            };
            if let Err(
                e @ (CallError::Unreachable { .. }
                | CallError::Refused {
                    code: tonic::Code::FailedPrecondition | tonic::Code::NotFound,
                    ..
                }),
            ) = &result
            {
                warn!(connector = %name, task = s.task, generation = s.generation, executor = %s.exec.id,
                    error = %e, "start not taken; retrying with backoff");
            }
            let out = outcome(result);
            if let Some((event, _)) = &out {
                info!(connector = %name, task = s.task, generation = s.generation, executor = %s.exec.id, ?event, "started");
            }
            (s.task, s.generation, out)
        }
    });
    Ok(futures::future::join_all(calls)
        .await
        .into_iter()
        .filter_map(|(task, generation, out)| {
            out.map(|(event, error)| (task, generation, event, error))
        })
        .collect())
}

/// Records the starts' answers in one write.
async fn record_answers(
    cluster: &Cluster,
    name: &str,
    answers: &[Answer],
) -> Result<(), HerderError> {
    cluster
        .record_connector_batched(name, |r| {
            if r.deleting {
                return None;
            }
            let target = r.target;
            let mut wrote = false;
            let mut herder_acts = false;
            for (task, generation, event, error) in answers {
                let connector_started = task.is_none() && *event == InstanceEvent::Started;
                let already_stale = r.task_configs_stale;
                let cur = match task {
                    Some(i) => match r.tasks.get_mut(*i) {
                        Some(t) => t,
                        None => continue,
                    },
                    None => &mut r.connector,
                };
                if cur.generation != *generation {
                    continue;
                }
                // A FAILED report of this generation that arrived before the start's
                // answer is newer news (the instance failed after it started, for example a
                // poll that panicked at once): an instance never runs again once failed.
                if *event == InstanceEvent::Started && cur.state == InstanceState::Failed {
                    continue;
                }
                // The executor's status report may have recorded this already.
                if cur.state.on(*event) == cur.state
                    && cur.error == *error
                    && (!connector_started || already_stale)
                {
                    continue;
                }
                cur.state = cur.state.on(*event);
                cur.error = error.clone();
                herder_acts |= cur.state.herder_acts_on(target, InstanceOf::of_task(*task));
                if connector_started {
                    // A new connector instance computes its task configs again.
                    r.task_configs_stale = true;
                }
                wrote = true;
            }
            wrote.then_some(((), herder_acts))
        })
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: tonic::Code) -> Result<Started, CallError> {
        Err(CallError::Refused {
            address: "a".into(),
            code,
            message: "no".into(),
        })
    }

    #[test]
    fn a_start_answered_running_is_recorded_started() {
        assert_eq!(
            outcome(Ok(Started::Running)),
            Some((InstanceEvent::Started, String::new()))
        );
    }

    #[test]
    fn a_start_answered_failed_is_recorded_failed_with_the_plugin_error() {
        assert_eq!(
            outcome(Ok(Started::Failed("boom".into()))),
            Some((InstanceEvent::Failed, "boom".into()))
        );
    }

    #[test]
    fn a_start_answered_failed_with_a_huge_error_is_recorded_cut() {
        let huge = "e".repeat(3_000_000);
        let Some((InstanceEvent::Failed, error)) = outcome(Ok(Started::Failed(huge))) else {
            panic!("recorded failed");
        };
        crate::model::assert_reported_cut(&error, 3_000_000);
    }

    #[test]
    fn a_start_without_an_answer_stays_restarting() {
        let e = CallError::Unreachable {
            address: "a".into(),
            message: "deadline".into(),
        };
        assert_eq!(outcome(Err(e)), None);
    }

    #[test]
    fn a_start_refused_between_epochs_or_generations_stays_restarting() {
        assert_eq!(outcome(refused(tonic::Code::FailedPrecondition)), None);
        assert_eq!(outcome(refused(tonic::Code::NotFound)), None);
    }

    #[test]
    fn a_start_refused_otherwise_is_recorded_failed_with_the_refusal() {
        let (event, error) = outcome(refused(tonic::Code::InvalidArgument)).unwrap();
        assert_eq!(event, InstanceEvent::Failed);
        assert!(error.contains("InvalidArgument"), "{error}");
    }
}
