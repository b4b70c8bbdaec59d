//! The purges of orphaned resources that run now (PurgeOrphanedResources,
//! docs/resources.md): which cleanup-only instance runs each, and the ledger its plugin
//! records into. An orphan's connector is gone from the store, so the releases of a
//! purge's instance cannot go to a connector record: they go here, and the purge reads
//! them when its stop answered. Kept in memory only: a purge is one admin call on the
//! leader, and one cut short (a restart) leaves its orphans listed, to be purged again.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::model::resources::{LedgerChange, LedgerEntry, Resource, ResourceOwner, apply_changes};

/// One purge's cleanup-only instance and its ledger.
#[derive(Debug, Clone)]
pub struct PurgeRun {
    /// Incarnation of the connector the orphans came from.
    pub incarnation: String,
    /// The instance (connector or task) whose cleanup runs.
    pub owner: ResourceOwner,
    /// The executor it runs on.
    pub executor: String,
    /// Its generation (reserved from the store's generation floor).
    pub generation: u64,
    /// The orphans' entries, changed by what the plugin records.
    pub ledger: Vec<LedgerEntry>,
}

/// The instance a ledger change comes from, as its executor names it.
#[derive(Debug, Clone, Copy)]
pub struct Recorder<'a> {
    /// The executor.
    pub executor: &'a str,
    /// The task; `None` for the connector instance.
    pub task: Option<u32>,
    /// The instance's generation.
    pub generation: u64,
    /// The incarnation it runs for.
    pub incarnation: &'a str,
}

/// Whether a ledger change from `from` belongs to `run`: only its own cleanup-only
/// instance records into it. Pure.
pub fn purge_admission(run: &PurgeRun, from: &Recorder<'_>) -> Result<(), String> {
    let Recorder {
        executor,
        task,
        generation,
        incarnation,
    } = *from;
    let owner = match task {
        Some(t) => ResourceOwner::Task(t),
        None => ResourceOwner::Connector,
    };
    match (
        run.incarnation == incarnation,
        run.owner == owner && run.executor == executor && run.generation == generation,
    ) {
        (true, true) => Ok(()),
        (false, _) => Err(format!(
            "incarnation {incarnation} is neither the connector's nor a purge's"
        )),
        (true, false) => Err(format!(
            "executor {executor} does not run the purge of {owner} at generation {generation}"
        )),
    }
}

/// The purges that run, by connector name (one at a time per name).
#[derive(Debug, Default)]
pub struct Purges {
    runs: Mutex<HashMap<String, PurgeRun>>,
}

impl Purges {
    fn runs(&self) -> MutexGuard<'_, HashMap<String, PurgeRun>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `run` starts for `connector`; false when one runs for it already.
    pub fn begin(&self, connector: &str, run: PurgeRun) -> bool {
        let mut runs = self.runs();
        if runs.contains_key(connector) {
            return false;
        }
        runs.insert(connector.to_owned(), run);
        true
    }

    /// Ends the purge of `connector`, returning its run with the ledger as the plugin
    /// left it.
    pub fn end(&self, connector: &str) -> Option<PurgeRun> {
        self.runs().remove(connector)
    }

    /// True while a purge of `connector` runs.
    pub fn running(&self, connector: &str) -> bool {
        self.runs().contains_key(connector)
    }

    /// Applies ledger changes of a purge's instance (`ExecutorRegistry.RecordResources`
    /// for a connector that is not in the store): `None` when no purge of `connector`
    /// runs, else whether they were taken (`Err` says why not).
    pub fn record(
        &self,
        connector: &str,
        from: &Recorder<'_>,
        changes: &[(Resource, LedgerChange)],
        now_ms: i64,
    ) -> Option<Result<(), String>> {
        let mut runs = self.runs();
        let run = runs.get_mut(connector)?;
        let incarnation = from.incarnation;
        Some(purge_admission(run, from).and_then(|()| {
            let owner = run.owner;
            apply_changes(
                connector,
                &mut run.ledger,
                owner,
                incarnation,
                changes,
                now_ms,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::{EntryState, Locator, ResourceKind};

    fn queue() -> Resource {
        Resource::created(
            ResourceKind::Queue,
            "q",
            Locator::default().host("h:5672").vhost("/"),
        )
    }

    fn run() -> PurgeRun {
        PurgeRun {
            incarnation: "i1".into(),
            owner: ResourceOwner::Connector,
            executor: "e1".into(),
            generation: 9,
            ledger: vec![LedgerEntry {
                resource: queue(),
                owner: ResourceOwner::Connector,
                state: EntryState::Confirmed,
                incarnation: "i1".into(),
                updated_at_ms: 0,
            }],
        }
    }

    fn from<'a>(
        executor: &'a str,
        task: Option<u32>,
        generation: u64,
        incarnation: &'a str,
    ) -> Recorder<'a> {
        Recorder {
            executor,
            task,
            generation,
            incarnation,
        }
    }

    #[test]
    fn the_purges_own_instance_is_admitted() {
        assert_eq!(purge_admission(&run(), &from("e1", None, 9, "i1")), Ok(()));
    }

    #[test]
    fn another_incarnation_is_refused() {
        assert!(purge_admission(&run(), &from("e1", None, 9, "i2")).is_err());
    }

    #[test]
    fn another_executor_generation_or_owner_is_refused() {
        assert!(purge_admission(&run(), &from("e2", None, 9, "i1")).is_err());
        assert!(purge_admission(&run(), &from("e1", None, 8, "i1")).is_err());
        assert!(purge_admission(&run(), &from("e1", Some(0), 9, "i1")).is_err());
    }

    #[test]
    fn a_release_of_the_purges_instance_lands_in_its_ledger() {
        let p = Purges::default();
        assert!(p.begin("c", run()));
        assert!(!p.begin("c", run()), "one purge per name");
        assert!(
            p.record("other", &from("e1", None, 9, "i1"), &[], 1)
                .is_none(),
            "no purge of that name"
        );
        let r = p.record(
            "c",
            &from("e1", None, 9, "i1"),
            &[(queue(), LedgerChange::Release)],
            1,
        );
        assert_eq!(r, Some(Ok(())));
        assert!(p.running("c"));
        let ended = p.end("c").unwrap();
        assert_eq!(ended.ledger[0].state, EntryState::Released);
        assert!(!p.running("c"));
    }
}
