//! Reconciling the recorded status with what an executor reports it hosts (issue 15,
//! point 7): an instance recorded RUNNING on an executor that, in two heartbeats in a
//! row, does not list it is gone (its stop ran, or it was lost in a way the control plane
//! did not see), so the record must stop saying RUNNING. Two in a row, because a
//! heartbeat built just before a start completed may arrive just after the start's answer
//! was recorded.

use std::collections::BTreeSet;

use crate::model::{ConnectorRecord, InstanceState, TargetState};

/// One instance: connector name, task index (`None`: the connector instance), generation.
pub type InstanceKey = (String, Option<u32>, u64);

/// Instances recorded RUNNING on `executor` at `epoch` that `hosted` (everything the
/// executor reports it hosts) does not list. Only connectors whose target is STARTED are
/// judged: a paused or stopped one is being stopped by the herder (an instance whose stop
/// runs is no longer listed), and a deleting one is the finalizer's.
pub fn missing<'a>(
    records: impl IntoIterator<Item = &'a ConnectorRecord>,
    executor: &str,
    epoch: u64,
    hosted: &BTreeSet<InstanceKey>,
) -> BTreeSet<InstanceKey> {
    let mut out = BTreeSet::new();
    for r in records {
        if r.deleting || r.target != TargetState::Started {
            continue;
        }
        let units = std::iter::once((None, &r.connector))
            .chain(r.tasks.iter().enumerate().map(|(i, t)| (Some(i as u32), t)));
        for (task, inst) in units {
            let recorded_here = inst.executor.as_deref() == Some(executor)
                && inst.epoch == epoch
                && inst.state == InstanceState::Running;
            if !recorded_here {
                continue;
            }
            // Cloned only for the instances recorded here (a heartbeat walks the cluster).
            let key = (r.name.clone(), task, inst.generation);
            if !hosted.contains(&key) {
                out.insert(key);
            }
        }
    }
    out
}

/// The instances to correct now: missing in this heartbeat and in the one before.
pub fn gone(previous: &BTreeSet<InstanceKey>, now: &BTreeSet<InstanceKey>) -> Vec<InstanceKey> {
    now.intersection(previous).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
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
