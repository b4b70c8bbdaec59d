//! The executors as this control plane knows them: leases, whether calls reach them,
//! identity probes, heartbeat status corrections and lost times, in one table
//! ([`ExecutorTable`]) with one owner ([`Executors`]) that the registry's handlers, the
//! herder, the finalizer and the admin API share through [`crate::reconcile::Cluster`].
//!
//! An executor is *live* while it holds its lease at its epoch and heartbeats on time,
//! *unresponsive* while it holds its lease but missed heartbeats
//! ([`UNRESPONSIVE_AFTER_HEARTBEATS`]), *lost* once the lease ran out or a newer epoch
//! registered ([`crate::plan::unit::Host`]). Work is placed only on live executors that
//! were found at their advertised address, and an executor that the control plane cannot
//! reach (a wrong `--advertise`) is retried with jittered backoff ([`reach_backoff`]) and
//! shown unreachable in ListExecutors.
//!
//! The rules are pure: lease decisions in [`lease`], call outcomes in [`reach`], the
//! table's bookkeeping in [`ExecutorTable`] (time passed in). [`Executors`] holds the table
//! behind one lock that no caller keeps: every method locks once, never across an await
//! or a store call, and hands back a value ([`ExecutorView`] for a whole snapshot), so a
//! heartbeat is answered without waiting on anything slower than another heartbeat.

pub mod lease;
pub mod reach;
mod table;
mod view;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tracing::{info, warn};

pub use lease::{LOST_EXECUTOR_EXPIRY_LEASES, Lease, LeaseConfig, UNRESPONSIVE_AFTER_HEARTBEATS};
pub use reach::{
    CallFailure, CallKind, REACH_BACKOFF_BASE_MS, REACH_BACKOFF_MAX_MS, ReachVerdict,
    UNREACHABLE_AFTER_FAILURES, reach_backoff, reach_verdict,
};
pub use table::{Adoption, ExecutorTable, Heartbeat};
pub use view::ExecutorView;

use crate::model::ExecutorRecord;
use crate::plan::hosted::InstanceKey;

/// The one owner of the executor table.
#[derive(Debug)]
pub struct Executors {
    config: LeaseConfig,
    table: Mutex<ExecutorTable>,
}

impl Executors {
    /// The table of a process that just started: every executor in `registered` (id and
    /// epoch, not lost) gets a fresh lease, since it cannot have heartbeated to us.
    pub fn new(config: LeaseConfig, registered: impl IntoIterator<Item = (String, u64)>) -> Self {
        let mut table = ExecutorTable::default();
        let now = Instant::now();
        for (id, epoch) in registered {
            table.grant(&id, Lease::from(now, config, epoch, 0));
        }
        Self {
            config,
            table: Mutex::new(table),
        }
    }

    fn table(&self) -> MutexGuard<'_, ExecutorTable> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a lease for `id` at a newly registered `epoch`, heard from at `heartbeat_ms`
    /// (Unix ms); false when that epoch is superseded ([`lease::superseded`]) and nothing
    /// was granted.
    pub fn grant_lease(&self, id: &str, epoch: u64, heartbeat_ms: i64) -> bool {
        let lease = Lease::from(Instant::now(), self.config, epoch, heartbeat_ms);
        self.table().grant(id, lease)
    }

    /// Notes that the store registered `id` at `epoch` (see [`ExecutorTable::registered`]).
    pub fn registered(&self, id: &str, epoch: u64) {
        self.table().registered(id, epoch);
    }

    /// A heartbeat from `id` at `epoch`, sent at `heartbeat_ms` (Unix ms).
    pub fn heartbeat(&self, id: &str, epoch: u64, heartbeat_ms: i64) -> Heartbeat {
        self.table()
            .heartbeat(id, epoch, Instant::now(), self.config, heartbeat_ms)
    }

    /// True when any lease is held for `id`, current or not.
    pub fn has_lease(&self, id: &str) -> bool {
        self.table().has_lease(id)
    }

    /// Grants `id` a lease at `epoch` (the store has it registered there, not lost)
    /// unless one was granted meanwhile.
    pub fn adopt_lease(&self, id: &str, epoch: u64, heartbeat_ms: i64) -> Adoption {
        let lease = Lease::from(Instant::now(), self.config, epoch, heartbeat_ms);
        self.table().adopt(id, lease)
    }

    /// True when `id` holds a current lease at `epoch`.
    pub fn holds_lease(&self, id: &str, epoch: u64) -> bool {
        self.table().holds(id, epoch, Instant::now())
    }

    /// True when `id` holds a current lease at any epoch.
    pub fn holds_any_lease(&self, id: &str) -> bool {
        self.table().holds_any(id, Instant::now())
    }

    /// Last heartbeat of `id`, Unix ms (0 when none since this process started).
    pub fn last_heartbeat_ms(&self, id: &str) -> i64 {
        self.table().last_heartbeat_ms(id)
    }

    /// Executors (id, epoch) whose lease ran out.
    pub fn expired_leases(&self) -> Vec<(String, u64)> {
        self.table().expired(Instant::now())
    }

    /// Drops `id`'s lease if it is still at `epoch`.
    pub fn drop_lease(&self, id: &str, epoch: u64) {
        self.table().drop_lease(id, epoch);
    }

    /// Notes the executors (id, epoch) the store has lost and returns those lost for
    /// [`LOST_EXECUTOR_EXPIRY_LEASES`] leases: time to forget them.
    pub fn long_lost(&self, lost: &[(String, u64)]) -> Vec<(String, u64)> {
        self.table()
            .long_lost(lost, Instant::now(), self.config.forget_lost_after())
    }

    /// A snapshot of every registered executor (`all`, from the store) and how it is doing.
    pub fn view(&self, all: BTreeMap<String, ExecutorRecord>) -> ExecutorView {
        self.table()
            .view(all, Instant::now(), self.config.unresponsive_after())
    }

    /// Records a call to `id` that did not reach it; later calls wait for the backoff.
    pub fn reach_failed(&self, id: &str, error: &str) {
        let now_unreachable =
            self.table()
                .reach_failed(id, error, Instant::now(), rand::random::<f64>());
        if now_unreachable {
            warn!(executor = %id, error = %error, "executor unreachable at its advertised address; retrying with backoff");
        }
    }

    /// Records an answer from `id`: its backoff ends.
    pub fn reach_ok(&self, id: &str) {
        if self.table().reach_ok(id) {
            info!(executor = %id, "executor reachable again");
        }
    }

    /// Records what a call's outcome says about `id` ([`reach_verdict`]): a failure
    /// (with its `error` text) starts or lengthens its backoff, an answer ends it.
    pub fn note_reach(&self, id: &str, kind: CallKind, failure: Option<(CallFailure, String)>) {
        let verdict = reach_verdict(kind, failure.as_ref().map(|(f, _)| *f));
        match (verdict, failure) {
            (ReachVerdict::Failed, Some((_, error))) => self.reach_failed(id, &error),
            (ReachVerdict::Failed, None) | (ReachVerdict::Answered, _) => self.reach_ok(id),
        }
    }

    /// True while calls to `id` wait for their backoff.
    pub fn reach_blocked(&self, id: &str) -> bool {
        self.table().reach_blocked(id, Instant::now())
    }

    /// The last error of an unreachable executor (empty when it is not).
    pub fn unreachable_error(&self, id: &str) -> String {
        self.table().unreachable_error(id)
    }

    /// Notes that `id` at `epoch` answered at its advertised address as itself.
    pub fn set_verified(&self, id: &str, epoch: u64) {
        self.table().set_verified(id, epoch);
    }

    /// True when `exec` still needs its identity probe, none runs, and its backoff allows
    /// one; marks it probing (end it with [`Executors::probe_done`]).
    pub fn probe_due(&self, exec: &ExecutorRecord) -> bool {
        self.table()
            .begin_probe(&exec.id, exec.epoch, Instant::now())
    }

    /// Ends a probe begun by [`Executors::probe_due`].
    pub fn probe_done(&self, id: &str) {
        self.table().end_probe(id);
    }

    /// True (and marked correcting) when no status correction of `id` runs.
    pub fn begin_correction(&self, id: &str) -> bool {
        self.table().begin_correction(id)
    }

    /// Ends a correction begun by [`Executors::begin_correction`].
    pub fn end_correction(&self, id: &str) {
        self.table().end_correction(id);
    }

    /// Notes what `id`'s heartbeat at `epoch` did not list and returns what its previous
    /// heartbeat at the same epoch did not list.
    pub fn record_hosted(
        &self,
        id: &str,
        epoch: u64,
        missing: BTreeSet<InstanceKey>,
    ) -> BTreeSet<InstanceKey> {
        self.table()
            .record_hosted(id, epoch, Instant::now(), missing)
    }

    /// True when `id`'s last heartbeat at `epoch`, judged after `since`, listed every
    /// instance recorded RUNNING on it.
    pub fn hosted_confirmed(&self, id: &str, epoch: u64, since: Instant) -> bool {
        self.table().hosted_confirmed(id, epoch, since)
    }
}
