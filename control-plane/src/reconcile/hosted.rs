//! Status corrections from heartbeats: an executor's heartbeat lists what it hosts, and an
//! instance recorded RUNNING there that two heartbeats in a row did not list is gone
//! without the control plane stopping it: it is recorded FAILED with a trace naming the
//! executor, and runs again when the operator restarts it ([`crate::plan::hosted`]
//! decides). One this control plane's herder stopped, whose record of the stop a failed
//! store write lost, is recorded UNASSIGNED instead and placed again
//! ([`super::herder_stops`]).
//!
//! A heartbeat is answered before its correction reads the store: the answer renews the
//! executor's lease, and a correction waits on the store (with an etcd that stopped
//! answering, up to its call timeout, as long as the executor waits for its answer), so an
//! executor whose answers waited on it would fence itself and stop every task while the
//! control plane held its lease. One correction runs per executor at a time (a heartbeat
//! that finds one running leaves its list; the next beat lists again), and one correction
//! walks the recorded instances at a time while the others reuse its walk, waiting on an
//! async lock that holds no thread while the walk waits on the store.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::warn;

use super::cluster::{Cluster, HerderError};
use crate::executors::Executors;
use crate::model::{InstanceEvent, InstanceState};
use crate::plan::hosted::{self, InstanceKey, RecordedRunning};
use crate::store::StoreError;

/// The last walk of the instances recorded RUNNING: when it began, what it cost, and what
/// it found (shared by heartbeats, [`hosted::walk_reusable`]).
pub(super) struct LastWalk {
    began: Instant,
    cost: Duration,
    walk: Arc<RecordedRunning>,
}

/// Marks an executor's correction ended when dropped, also when the correction panicked.
struct Correcting<'a>(&'a Executors, &'a str);

impl Drop for Correcting<'_> {
    fn drop(&mut self) {
        self.0.end_correction(self.1);
    }
}

impl Cluster {
    /// The instances recorded RUNNING, by executor and epoch: a fresh walk of the cluster,
    /// or the last one while [`hosted::walk_reusable`] says so. One correction walks at a
    /// time and the others reuse its walk.
    async fn recorded_running(&self) -> Result<Arc<RecordedRunning>, StoreError> {
        let mut last = self.last_walk.lock().await;
        let interval = Duration::from_millis(u64::from(self.lease.heartbeat_interval_ms));
        if let Some(l) = &*last
            && hosted::walk_reusable(l.began.elapsed(), l.cost, interval)
        {
            return Ok(l.walk.clone());
        }
        let began = Instant::now();
        let records = self.store.connectors_shared()?;
        let walk = Arc::new(RecordedRunning::walk(records.iter().map(AsRef::as_ref)));
        *last = Some(LastWalk {
            began,
            cost: began.elapsed(),
            walk: walk.clone(),
        });
        Ok(walk)
    }

    /// Runs [`Cluster::reconcile_hosted`] for a heartbeat apart from its answer, at most
    /// one at a time per executor (see the module's doc).
    pub fn spawn_hosted_correction(
        self: &Arc<Self>,
        executor: String,
        epoch: u64,
        hosted: BTreeSet<InstanceKey>,
    ) {
        if !self.executors.begin_correction(&executor) {
            return;
        }
        let cluster = self.clone();
        wharf::task::spawn(
            wharf::task::TaskKind::Detached,
            "hosted correction",
            async move {
                let _done = Correcting(&cluster.executors, &executor);
                if let Err(e) = cluster.reconcile_hosted(&executor, epoch, hosted).await {
                    warn!(executor = %executor, error = %e, "status correction from heartbeat failed; retried on a later heartbeat");
                }
            },
        );
    }

    /// Corrects the status from a heartbeat that lists everything `executor` (at `epoch`)
    /// hosts: an instance recorded RUNNING there that two heartbeats in a row did not list
    /// is gone without the control plane stopping it, and is recorded FAILED with a trace
    /// naming the executor (`gone_trace`); the operator's restart runs it again.
    ///
    /// # Errors
    /// Store failures.
    pub async fn reconcile_hosted(
        &self,
        executor: &str,
        epoch: u64,
        hosted: BTreeSet<InstanceKey>,
    ) -> Result<(), HerderError> {
        let now = self
            .recorded_running()
            .await?
            .missing(executor, epoch, &hosted);
        let previous = self.executors.record_hosted(executor, epoch, now.clone());
        for (name, task, generation) in hosted::gone(&previous, &now) {
            let stopped_here = self
                .herder_stops
                .stopped(&(name.clone(), task, generation), std::time::Instant::now());
            let changed = self
                .modify_connector_batched(&name, |r| {
                    if r.deleting {
                        return None;
                    }
                    let cur = match task {
                        Some(i) => r.tasks.get_mut(i as usize)?,
                        None => &mut r.connector,
                    };
                    if cur.generation != generation
                        || cur.executor.as_deref() != Some(executor)
                        || cur.state != InstanceState::Running
                    {
                        return None;
                    }
                    match gone_event(stopped_here) {
                        // The herder stopped it and its record of the stop was not
                        // written: unassigned, and placed again as the herder meant.
                        InstanceEvent::Unassigned => {
                            cur.state = cur.state.on(InstanceEvent::Unassigned);
                            cur.executor = None;
                            cur.epoch = 0;
                            cur.error.clear();
                        }
                        // FAILED on its (live) executor: the herder keeps it as it is, and
                        // the operator's restart runs it again. Started again on its own, a
                        // plugin whose stop dropped its resources would re-create them
                        // empty and show RUNNING.
                        event => {
                            cur.state = cur.state.on(event);
                            cur.error = gone_trace(generation, executor);
                        }
                    }
                    Some(())
                })
                .await?;
            match (changed, stopped_here) {
                (Some(()), true) => {
                    warn!(connector = %name, task = task, generation, executor = %executor,
                        "executor no longer hosts this instance, which the herder stopped without recording it; recorded UNASSIGNED, placed again");
                    self.changed(&name);
                }
                (Some(()), false) => {
                    warn!(connector = %name, task = task, generation, executor = %executor,
                        "executor no longer hosts this instance, and the control plane did not stop it; recorded FAILED, not started again until restarted");
                }
                (None, _) => {}
            }
        }
        Ok(())
    }
}

/// What an instance recorded RUNNING and gone from its executor becomes: UNASSIGNED when
/// this control plane's herder stopped it (`stopped_here`: its record of the stop was not
/// written), else FAILED (nobody here stopped it). Pure.
pub fn gone_event(stopped_here: bool) -> InstanceEvent {
    match stopped_here {
        true => InstanceEvent::Unassigned,
        false => InstanceEvent::Failed,
    }
}

/// The status trace of an instance of `generation` gone from `executor` without the
/// control plane stopping it.
pub fn gone_trace(generation: u64, executor: &str) -> String {
    format!(
        "instance of generation {generation} is no longer hosted by executor {executor}, and the control plane did not stop it (another process stopped it through the executor's port, or the executor lost it); not started again on its own: restart it to run it again"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_the_herder_stopped_is_unassigned() {
        assert_eq!(gone_event(true), InstanceEvent::Unassigned);
    }

    #[test]
    fn an_instance_nobody_here_stopped_is_failed() {
        assert_eq!(gone_event(false), InstanceEvent::Failed);
    }
}
