//! What the finalizer knows about the deletions it runs that the store does not keep:
//! which connectors' finalizer tasks run, and the final records of deletions that just
//! finished. The finalizer writes it; the admin API reads it.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::model::DeletionRecord;

/// How long the final record of a finished deletion is kept for watchers, in milliseconds.
const FINISHED_DELETION_KEEP_MS: u64 = 60_000;

#[derive(Debug, Default)]
struct State {
    /// Final records of recently finished deletions, by connector name, with when they
    /// finished.
    finished: HashMap<String, (Instant, DeletionRecord)>,
    /// Connectors whose finalizer task runs.
    in_flight: HashSet<String>,
}

/// The finalizer's in-memory record of its deletions.
///
/// Why each part: the store forgets a deletion in the write that ends it, and the DELETED
/// event of WatchConnector still shows where each cleanup ran (the finished records); a
/// forced deletion ends in the store while a cleanup stop it skipped may still be in
/// flight, and a connector created again under that name must not start before that stop
/// ended, since it would remove what the new one provisioned under the same names (the
/// in-flight set).
#[derive(Debug, Default)]
pub struct Deletions {
    state: Mutex<State>,
}

impl Deletions {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the final record of a deletion that just finished (see
    /// [`Deletions::finished`]); records older than a minute are dropped.
    pub fn record_finished(&self, d: &DeletionRecord) {
        let keep = Duration::from_millis(FINISHED_DELETION_KEEP_MS);
        let mut state = self.state();
        state.finished.retain(|_, (at, _)| at.elapsed() < keep);
        state
            .finished
            .insert(d.name.clone(), (Instant::now(), d.clone()));
    }

    /// The final record of `name`'s deletion if it finished within the last minute: every
    /// step as it ended (DONE or SKIPPED, with executor, generation and attempts).
    pub fn finished(&self, name: &str) -> Option<DeletionRecord> {
        self.state()
            .finished
            .get(name)
            .filter(|(at, _)| at.elapsed() < Duration::from_millis(FINISHED_DELETION_KEEP_MS))
            .map(|(_, d)| d.clone())
    }

    /// Marks `name`'s finalizer task as running (`true`) or ended (`false`).
    pub fn set_in_flight(&self, name: &str, running: bool) {
        let mut state = self.state();
        if running {
            state.in_flight.insert(name.to_owned());
        } else {
            state.in_flight.remove(name);
        }
    }

    /// True while a finalizer task of `name` runs (see [`Deletions::set_in_flight`]).
    pub fn in_flight(&self, name: &str) -> bool {
        self.state().in_flight.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cleanup_is_in_flight_from_its_start_to_its_end() {
        let d = Deletions::default();
        assert!(!d.in_flight("c"));
        d.set_in_flight("c", true);
        assert!(d.in_flight("c"));
        assert!(!d.in_flight("other"));
        d.set_in_flight("c", false);
        assert!(!d.in_flight("c"));
    }

    #[test]
    fn an_unknown_deletion_has_no_final_record() {
        assert!(Deletions::default().finished("c").is_none());
    }
}
