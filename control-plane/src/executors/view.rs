//! A snapshot of every registered executor and how it is doing.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::ExecutorRecord;
use crate::plan::unit::Host;

/// A snapshot of every registered executor and how it is doing, taken once per pass so
/// that decisions read facts, not the store.
#[derive(Debug, Clone, Default)]
pub struct ExecutorView {
    /// Every registered executor, by id.
    pub all: BTreeMap<String, ExecutorRecord>,
    /// Health of each, by id (see [`Host`]).
    pub health: BTreeMap<String, Host>,
    /// Ids that new work may go to: live, reachable and verified at their epoch.
    pub placeable: BTreeSet<String>,
}

impl ExecutorView {
    /// How the host of an instance recorded on `executor` at `epoch` is doing: lost when
    /// there is none, it is unknown, or it registered again since.
    pub fn host(&self, executor: Option<&str>, epoch: u64) -> Host {
        let Some(id) = executor else {
            return Host::Lost;
        };
        match (self.all.get(id), self.health.get(id)) {
            (Some(e), Some(h)) if e.epoch == epoch => *h,
            (Some(_) | None, Some(_) | None) => Host::Lost,
        }
    }

    /// The record of a live executor (holds its lease and answers heartbeats).
    pub fn live(&self, id: &str) -> Option<&ExecutorRecord> {
        self.all
            .get(id)
            .filter(|_| self.health.get(id) == Some(&Host::Live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> ExecutorView {
        let rec = |id: &str, epoch| ExecutorRecord {
            id: id.into(),
            address: "http://127.0.0.2:1".into(),
            epoch,
            plugins: Vec::new(),
            lost: false,
            record_log: String::new(),
            transforms: Vec::new(),
        };
        ExecutorView {
            all: BTreeMap::from([("a".into(), rec("a", 2)), ("b".into(), rec("b", 1))]),
            health: BTreeMap::from([("a".into(), Host::Live), ("b".into(), Host::Unresponsive)]),
            placeable: BTreeSet::from(["a".into()]),
        }
    }

    #[test]
    fn the_host_of_an_instance_at_the_current_epoch_is_its_executor_health() {
        assert_eq!(view().host(Some("a"), 2), Host::Live);
        assert_eq!(view().host(Some("b"), 1), Host::Unresponsive);
    }

    #[test]
    fn the_host_of_an_instance_of_an_older_epoch_none_or_an_unknown_one_is_lost() {
        assert_eq!(view().host(Some("a"), 1), Host::Lost);
        assert_eq!(view().host(None, 2), Host::Lost);
        assert_eq!(view().host(Some("z"), 2), Host::Lost);
    }

    #[test]
    fn only_live_executors_are_returned_as_live() {
        assert!(view().live("a").is_some());
        assert!(view().live("b").is_none());
        assert!(view().live("z").is_none());
    }
}
