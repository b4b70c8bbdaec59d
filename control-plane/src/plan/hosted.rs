//! Reconciling the recorded status with what an executor reports it hosts: an instance recorded RUNNING on an executor that, in two heartbeats in a
//! row, does not list it is gone (its stop ran, or it was lost in a way the control plane
//! did not see), so the record must stop saying RUNNING: it says FAILED, with a trace
//! naming the executor, until the operator restarts it. Two in a row, because a
//! heartbeat built just before a start completed may arrive just after the start's answer
//! was recorded.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::model::{ConnectorRecord, InstanceState, TargetState};

/// One instance: connector name, task index (`None`: the connector instance), generation.
pub type InstanceKey = (String, Option<u32>, u64);

/// Every instance recorded RUNNING, by the executor and epoch it was recorded on: one
/// walk over the cluster that the heartbeats of every executor can share. Only
/// connectors whose target is STARTED are judged: a paused or stopped one is being
/// stopped by the herder (an instance whose stop runs is no longer listed), and a
/// deleting one is the finalizer's.
#[derive(Debug, Default)]
pub struct RecordedRunning(HashMap<(String, u64), Vec<InstanceKey>>);

impl RecordedRunning {
    /// Walks `records`.
    pub fn walk<'a>(records: impl IntoIterator<Item = &'a ConnectorRecord>) -> Self {
        // Keyed by borrowed executor ids while walking: one owned id per executor, not
        // one per instance.
        let mut by: HashMap<(&str, u64), Vec<InstanceKey>> = HashMap::new();
        for r in records {
            if r.deleting || r.target != TargetState::Started {
                continue;
            }
            let units = std::iter::once((None, &r.connector))
                .chain(r.tasks.iter().enumerate().map(|(i, t)| (Some(i as u32), t)));
            for (task, inst) in units {
                let Some(executor) = inst.executor.as_deref() else {
                    continue;
                };
                if inst.state == InstanceState::Running {
                    by.entry((executor, inst.epoch)).or_default().push((
                        r.name.clone(),
                        task,
                        inst.generation,
                    ));
                }
            }
        }
        Self(
            by.into_iter()
                .map(|((executor, epoch), keys)| ((executor.to_owned(), epoch), keys))
                .collect(),
        )
    }

    /// Instances recorded RUNNING on `executor` at `epoch` that `hosted` (everything the
    /// executor reports it hosts) does not list.
    pub fn missing(
        &self,
        executor: &str,
        epoch: u64,
        hosted: &BTreeSet<InstanceKey>,
    ) -> BTreeSet<InstanceKey> {
        self.0
            .get(&(executor.to_owned(), epoch))
            .into_iter()
            .flatten()
            .filter(|k| !hosted.contains(*k))
            .cloned()
            .collect()
    }
}

/// Walks of the cluster ([`RecordedRunning::walk`]) cheaper than this are made for every
/// heartbeat; a dearer one is shared (at 10,000 x 10 a walk per heartbeat of each of 10
/// executors took a tenth of the control plane's time: bench/NOTES.md, "Scale").
pub const SHARED_WALK_MIN_COST: Duration = Duration::from_millis(1);

/// Whether a heartbeat may judge what its executor hosts against a walk made `age` ago
/// that cost `cost`: a cheap walk is made again for each heartbeat; a dear one is reused
/// for half a heartbeat interval, so two heartbeats of one executor in a row (the rule
/// above) never share one, and a correction comes at most half an interval later.
pub fn walk_reusable(age: Duration, cost: Duration, heartbeat_interval: Duration) -> bool {
    match (cost >= SHARED_WALK_MIN_COST, age < heartbeat_interval / 2) {
        (true, true) => true,
        (false, _) | (true, false) => false,
    }
}

/// The instances to correct now: missing in this heartbeat and in the one before.
pub fn gone(previous: &BTreeSet<InstanceKey>, now: &BTreeSet<InstanceKey>) -> Vec<InstanceKey> {
    now.intersection(previous).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing<'a>(
        records: impl IntoIterator<Item = &'a ConnectorRecord>,
        executor: &str,
        epoch: u64,
        hosted: &BTreeSet<InstanceKey>,
    ) -> BTreeSet<InstanceKey> {
        RecordedRunning::walk(records).missing(executor, epoch, hosted)
    }

    #[test]
    fn a_cheap_walk_is_made_again_for_every_heartbeat() {
        let interval = Duration::from_secs(1);
        assert!(!walk_reusable(
            Duration::ZERO,
            Duration::from_micros(900),
            interval
        ));
    }

    #[test]
    fn a_dear_walk_is_shared_for_half_a_heartbeat_interval() {
        let interval = Duration::from_secs(1);
        assert!(walk_reusable(
            Duration::from_millis(499),
            Duration::from_millis(10),
            interval
        ));
    }

    #[test]
    fn a_dear_walk_older_than_half_an_interval_is_made_again() {
        let interval = Duration::from_secs(1);
        assert!(!walk_reusable(
            Duration::from_millis(500),
            Duration::from_millis(10),
            interval
        ));
    }
    use crate::model::{ConnectorSpec, Instance};
    use std::num::NonZeroU32;

    fn record(state: InstanceState) -> ConnectorRecord {
        let spec = ConnectorSpec {
            name: wharf::ids::ConnectorName::parse("c").unwrap(),
            plugin: "p".into(),
            tasks_max: NonZeroU32::new(1).unwrap(),
            config: Default::default(),
        };
        let mut r = ConnectorRecord::new(&spec, TargetState::Started);
        let on = |generation| Instance {
            executor: Some("e".into()),
            epoch: 7,
            generation,
            state,
            error: String::new(),
            restart: false,
        };
        r.connector = on(1);
        r.tasks = vec![on(2)];
        r
    }

    #[test]
    fn a_running_task_the_executor_does_not_list_is_missing() {
        let r = record(InstanceState::Running);
        let hosted: BTreeSet<InstanceKey> = [("c".to_owned(), None, 1)].into();
        let m = missing([&r], "e", 7, &hosted);
        assert_eq!(m, [("c".to_owned(), Some(0), 2)].into());
    }

    #[test]
    fn instances_on_another_epoch_or_executor_are_not_judged() {
        let r = record(InstanceState::Running);
        assert!(missing([&r], "e", 8, &BTreeSet::new()).is_empty());
        assert!(missing([&r], "other", 7, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn a_start_in_flight_or_a_failed_instance_is_not_judged() {
        for s in [InstanceState::Restarting, InstanceState::Failed] {
            assert!(missing([&record(s)], "e", 7, &BTreeSet::new()).is_empty());
        }
    }

    #[test]
    fn a_paused_or_stopped_connector_is_left_to_the_herder() {
        for t in [TargetState::Paused, TargetState::Stopped] {
            let mut r = record(InstanceState::Running);
            r.target = t;
            assert!(missing([&r], "e", 7, &BTreeSet::new()).is_empty());
        }
    }

    #[test]
    fn a_deleting_connector_is_left_to_the_finalizer() {
        let mut r = record(InstanceState::Running);
        r.deleting = true;
        assert!(missing([&r], "e", 7, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn an_instance_missing_once_is_not_gone_yet_twice_it_is() {
        let k: InstanceKey = ("c".into(), Some(0), 2);
        let once: BTreeSet<InstanceKey> = [k.clone()].into();
        assert!(gone(&BTreeSet::new(), &once).is_empty());
        assert_eq!(gone(&once, &once), vec![k]);
    }
}
