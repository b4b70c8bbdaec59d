//! State shared by the herder, the finalizer and the gRPC services: the store, executor
//! clients, the executor table ([`crate::executors`]), the finalizer's record of its
//! deletions ([`Deletions`]), the change feed and wake-ups.
//!
//! What changes the executor table and also wakes the loops, reads the store or calls an
//! executor is a method here (a registration's lease, a heartbeat, an adoption, lease
//! expiry, the identity probe, calls bounded by the lease); what only reads or notes a
//! fact goes to [`Cluster::executors`] directly.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, broadcast};
use tracing::{info, warn};

use super::client::{CallError, ExecutorClients};
use super::deletions::Deletions;
use super::hosted::LastWalk;
use crate::executors::{
    Adoption, CallFailure, Executors, Heartbeat, LeaseConfig, lease::adoptable,
};
pub use crate::executors::{CallKind, ExecutorView};
use crate::model::{ConnectorRecord, ExecutorRecord};
use crate::store::{StateStore, StoreError};

/// How often the herder and the finalizer look again without being woken, in ms.
pub const RECONCILE_INTERVAL_MS: u64 = 250;
/// Longest time between two herder passes over every connector while changes keep
/// waking it, in ms: retries of steps that changed nothing (a task-config call that
/// failed) wait at most this long.
pub const FULL_PASS_INTERVAL_MS: u64 = 1_000;
/// Task starts the herder has in flight at once, over all connectors: bounds the memory
/// of a burst (1,000 connectors x 10 tasks created together).
const MAX_TASK_STARTS_IN_FLIGHT: usize = 256;
/// Capacity of the change feed that WatchConnector listens to.
const CHANGE_FEED_CAPACITY: usize = 1024;
/// Attempts of a read-modify-write on a conflicting revision before giving up.
const MODIFY_ATTEMPTS: usize = 16;
/// How often a pending call checks that its executor still holds its lease, in ms.
const LEASE_CHECK_INTERVAL_MS: u64 = 100;

/// State shared by the herder, the finalizer and the gRPC services.
pub struct Cluster {
    /// The store.
    pub store: Arc<dyn StateStore>,
    /// Executor calls.
    pub clients: ExecutorClients,
    /// Lease settings.
    pub lease: LeaseConfig,
    /// Every executor and how it is doing: the one owner of that state.
    pub executors: Executors,
    /// The finalizer's record of the deletions it runs, read by the admin API.
    pub deletions: Deletions,
    /// The purges of orphaned resources that run, and their instances' ledgers.
    pub purges: super::purges::Purges,
    pub(super) herder_wake: Notify,
    pub(super) finalizer_wake: Notify,
    changes: broadcast::Sender<String>,
    dirty: Mutex<Dirty>,
    pub(super) task_starts: tokio::sync::Semaphore,
    /// The last walk of the instances recorded RUNNING, behind the async lock that the
    /// one correction walking holds ([`super::hosted`]).
    pub(super) last_walk: tokio::sync::Mutex<Option<LastWalk>>,
    /// The stops with `false` the herder sent and the executor answered, for the
    /// heartbeat correction ([`super::herder_stops`]).
    pub(super) herder_stops: super::herder_stops::HerderStops,
    /// The Kafka cluster id the executors' heartbeats last carried (their record log is
    /// Kafka): `GET /`'s `kafka_cluster_id`.
    kafka_cluster_id: Mutex<Option<String>>,
}

/// What the next herder pass must look at.
#[derive(Debug, Default)]
pub(super) struct Dirty {
    /// Connectors changed since the last pass took the set.
    pub(super) names: HashSet<String>,
    /// Every connector.
    pub(super) all: bool,
}

/// Why a herder step failed; the step is retried on the next pass.
#[derive(Debug, thiserror::Error)]
pub enum HerderError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record kept changing under a read-modify-write.
    #[error("connector {0} kept changing during an update")]
    Contended(String),
}

/// Unix time now, in milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// How a failed call counts for its executor's reachability.
fn call_failure(error: &CallError) -> (CallFailure, String) {
    let failure = match error.code() {
        None => CallFailure::NoAnswer,
        Some(code) => CallFailure::Refused(code),
    };
    (failure, error.to_string())
}

impl Cluster {
    /// A cluster view over `store`; every executor already registered gets a fresh lease.
    ///
    /// # Errors
    /// When the store cannot be read.
    pub fn new(store: Arc<dyn StateStore>, lease: LeaseConfig) -> Result<Arc<Self>, StoreError> {
        let (changes, _) = broadcast::channel(CHANGE_FEED_CAPACITY);
        let registered = store
            .executors()?
            .into_iter()
            .filter(|e| !e.lost)
            .map(|e| (e.id, e.epoch));
        let executors = Executors::new(lease, registered);
        Ok(Arc::new(Self {
            store,
            clients: ExecutorClients::default(),
            lease,
            executors,
            deletions: Deletions::default(),
            purges: super::purges::Purges::default(),
            herder_wake: Notify::new(),
            finalizer_wake: Notify::new(),
            changes,
            dirty: Mutex::new(Dirty {
                names: HashSet::new(),
                all: true,
            }),
            task_starts: tokio::sync::Semaphore::new(MAX_TASK_STARTS_IN_FLIGHT),
            last_walk: tokio::sync::Mutex::new(None),
            herder_stops: super::herder_stops::HerderStops::default(),
            kafka_cluster_id: Mutex::new(None),
        }))
    }

    /// Tells watchers that `name` changed, marks it for the herder's next pass and wakes
    /// both loops.
    pub fn changed(&self, name: &str) {
        self.mark_dirty(name);
        let _ = self.changes.send(name.to_owned());
        self.herder_wake.notify_one();
        self.finalizer_wake.notify_one();
    }

    /// Tells watchers that `name` changed and wakes the finalizer, for a change the
    /// herder has nothing to do about (it is not marked for the herder's next pass).
    fn changed_unplanned(&self, name: &str) {
        let _ = self.changes.send(name.to_owned());
        self.finalizer_wake.notify_one();
    }

    fn dirty(&self) -> std::sync::MutexGuard<'_, Dirty> {
        self.dirty
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `name` for the herder's next pass without waking it.
    pub(super) fn mark_dirty(&self, name: &str) {
        let mut d = self.dirty();
        if !d.all {
            d.names.insert(name.to_owned());
        }
    }

    /// Makes the herder's next pass cover every connector.
    pub(super) fn mark_all_dirty(&self) {
        let mut d = self.dirty();
        d.all = true;
        d.names.clear();
    }

    pub(super) fn take_dirty(&self) -> Dirty {
        std::mem::take(&mut *self.dirty())
    }

    /// True when some connector is marked for the herder's next pass.
    pub(super) fn has_dirty(&self) -> bool {
        let d = self.dirty();
        d.all || !d.names.is_empty()
    }

    /// Subscribes to the names of changed connectors.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// Wakes the herder (for a pass over every connector) and the finalizer.
    pub fn wake(&self) {
        self.mark_all_dirty();
        self.herder_wake.notify_one();
        self.finalizer_wake.notify_one();
    }

    /// Starts a lease for a newly registered epoch; false when a newer epoch of `id`
    /// registered meanwhile ([`crate::executors::lease::superseded`]) and nothing was
    /// granted. Its backoff is not reset here: a registration resets it in
    /// [`Cluster::verify`], before the probe that may record a failure again.
    pub fn grant_lease(&self, id: &str, epoch: u64) -> bool {
        let granted = self.executors.grant_lease(id, epoch, now_ms());
        if granted {
            self.wake();
        }
        granted
    }

    /// Notes that the store just registered `id` at `epoch`, before its probe and its
    /// grant: older epochs of `id` hold no lease from now on and their heartbeats and
    /// calls are refused, so the executor registers again if it holds one of them.
    /// Called in the same poll as the store write, so that a registration whose caller
    /// gave up still fences what it superseded.
    pub fn registered(&self, id: &str, epoch: u64) {
        self.executors.registered(id, epoch);
    }

    /// Renews the lease of `id` at `epoch`; false when that epoch holds no lease (fenced
    /// or expired, or none is held here: see [`Cluster::adopt_lease`]).
    pub fn renew_lease(&self, id: &str, epoch: u64) -> bool {
        match self.executors.heartbeat(id, epoch, now_ms()) {
            Heartbeat::Renewed { was_silent } => {
                if was_silent {
                    // It answers again: work may be placed on it.
                    self.wake();
                }
                true
            }
            Heartbeat::NoLease | Heartbeat::Fenced => false,
        }
    }

    /// Grants `id` a lease at `epoch` when this process holds none for it at all and the
    /// store has it registered at `epoch`, not lost; true when it did. Why: a replica
    /// that just became leader grants the term's leases from the store right after its
    /// role changed ([`Cluster::new`] does the same at a start), and a heartbeat or an
    /// offset commit arriving in between must not be refused as fenced, which would fence
    /// the executor and restart its work. An executor whose lease ran out keeps its entry
    /// until the store marks it lost, so it is never adopted back; a store that does not
    /// answer adopts nothing. The store is read without the table's lock held.
    pub fn adopt_lease(&self, id: &str, epoch: u64) -> bool {
        if self.executors.has_lease(id) {
            return false;
        }
        let stored = self.store.executor(id).ok().flatten();
        if !adoptable(stored.as_ref(), epoch) {
            return false;
        }
        match self.executors.adopt_lease(id, epoch, now_ms()) {
            Adoption::HeldAlready { at_epoch } => at_epoch,
            Adoption::Superseded => false,
            Adoption::Adopted => {
                info!(executor = %id, epoch, "lease adopted from the store (new term)");
                self.wake();
                true
            }
        }
    }

    /// True when `id` holds a current lease at `epoch`.
    pub fn holds_lease(&self, id: &str, epoch: u64) -> bool {
        self.executors.holds_lease(id, epoch)
    }

    /// Last heartbeat of `id`, Unix ms (0 when none since this process started).
    pub fn last_heartbeat_ms(&self, id: &str) -> i64 {
        self.executors.last_heartbeat_ms(id)
    }

    /// The last error of an unreachable executor (empty when it is not).
    pub fn unreachable_error(&self, id: &str) -> String {
        self.executors.unreachable_error(id)
    }

    /// Marks every executor whose lease ran out as lost (fencing its epoch).
    pub(super) fn expire_leases(&self) -> Result<(), StoreError> {
        for (id, epoch) in self.executors.expired_leases() {
            if self.store.mark_executor_lost(&id, epoch)? {
                warn!(executor = %id, epoch, "executor lease expired; marked lost, its work moves");
                crate::observe::lease_expired();
            }
            self.executors.drop_lease(&id, epoch);
        }
        self.forget_long_lost()
    }

    /// Forgets executors that stayed lost for
    /// [`crate::executors::LOST_EXECUTOR_EXPIRY_LEASES`] leases (a cleanly stopped
    /// executor does not stay LOST in ListExecutors forever). Its epoch is fenced already
    /// and nothing is placed on a lost executor, so only the listing changes; an executor
    /// that registers again gets a new record.
    fn forget_long_lost(&self) -> Result<(), StoreError> {
        let lost: Vec<(String, u64)> = self
            .store
            .executors()?
            .into_iter()
            .filter(|e| e.lost)
            .map(|e| (e.id, e.epoch))
            .collect();
        for (id, epoch) in self.executors.long_lost(&lost) {
            if self.store.forget_executor(&id, epoch)? {
                let lost_for_ms = self.lease.forget_lost_after().as_millis() as u64;
                info!(executor = %id, epoch, lost_for_ms, "lost executor forgotten");
            }
        }
        Ok(())
    }

    /// Every executor and how it is doing, from the store and the executor table
    /// ([`crate::executors::lease::health`]).
    ///
    /// # Errors
    /// When the store cannot be read.
    pub fn executor_view(&self) -> Result<ExecutorView, StoreError> {
        let all: BTreeMap<String, ExecutorRecord> = self
            .store
            .executors()?
            .into_iter()
            .map(|e| (e.id.clone(), e))
            .collect();
        Ok(self.executors.view(all))
    }

    /// Returns once `exec` no longer holds a lease at its epoch: a call pending on it is
    /// then abandoned (the host is fenced), so that a frozen executor holds up nothing
    /// longer than its lease.
    pub async fn lease_lost(&self, exec: &ExecutorRecord) {
        while self.executors.holds_lease(&exec.id, exec.epoch) {
            tokio::time::sleep(Duration::from_millis(LEASE_CHECK_INTERVAL_MS)).await;
        }
    }

    /// Returns once executor `id` holds no lease at any epoch (its lease ran out and it did
    /// not register again). A stop sent under an older epoch of an executor that
    /// registered again since is still answered (from the record of the stop it already
    /// ran, or refused), so waiting for that answer is safe, and abandoning it would
    /// re-host a cleanup that already ran (docs/contract.md, "Executor self-fencing").
    pub async fn lease_lost_at_every_epoch(&self, id: &str) {
        while self.executors.holds_any_lease(id) {
            tokio::time::sleep(Duration::from_millis(LEASE_CHECK_INTERVAL_MS)).await;
        }
    }

    /// Runs `call` to `exec`, abandoned (as unreachable) once `exec` loses its lease, so
    /// that no call to a frozen executor holds anything up longer than its lease; records
    /// whether it reached the executor ([`Cluster::note_reach`]).
    ///
    /// # Errors
    /// The call's [`CallError`].
    pub async fn call<T>(
        &self,
        exec: &ExecutorRecord,
        kind: CallKind,
        call: impl std::future::Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let result = tokio::select! {
            r = call => r,
            () = self.lease_lost(exec) => Err(CallError::Unreachable {
                address: exec.address.clone(),
                message: "lease expired while the call was pending; call abandoned".into(),
            }),
        };
        self.note_reach(exec, kind, result.as_ref().err());
        result
    }

    /// Records what a call's outcome says about `exec`
    /// ([`crate::executors::reach_verdict`]): a failure starts or lengthens its backoff,
    /// an answer ends it.
    pub fn note_reach(&self, exec: &ExecutorRecord, kind: CallKind, error: Option<&CallError>) {
        self.executors
            .note_reach(&exec.id, kind, error.map(call_failure));
    }

    /// Checks that the process at `exec`'s advertised address is `exec` (over TLS its
    /// certificate names `exec.id`; its ListAssignments answer names `exec.id`), bounded by
    /// [`super::client::PROBE_TIMEOUT_MS`]. Until this succeeds for an epoch, no new work is
    /// placed on it: a process holding one executor's certificate that registers another's
    /// address gets nothing, and takes nothing away from the executor really there (no
    /// rebalance toward it). A failure counts in its backoff and, repeated, shows it
    /// unreachable with the reason; the herder probes again after the backoff
    /// ([`Executors::probe_due`]). `fresh`: a new registration, whose backoff starts over.
    pub async fn verify(&self, exec: &ExecutorRecord, fresh: bool) -> bool {
        if fresh {
            self.executors.reach_ok(&exec.id);
        }
        let result = match tokio::time::timeout(
            Duration::from_millis(super::client::PROBE_TIMEOUT_MS),
            self.clients.probe_on(exec),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(CallError::Unreachable {
                address: exec.address.clone(),
                message: format!(
                    "no answer to the identity probe within {} ms",
                    super::client::PROBE_TIMEOUT_MS
                ),
            }),
        };
        self.note_reach(exec, CallKind::Probe, result.as_ref().err());
        match result {
            Ok(()) => {
                self.executors.set_verified(&exec.id, exec.epoch);
                self.wake();
                true
            }
            Err(e) => {
                let heard = self.executors.last_heartbeat_ms(&exec.id) != 0;
                if probe_failure_is_a_warning(fresh, heard) {
                    warn!(executor = %exec.id, epoch = exec.epoch, address = %exec.address, error = %e,
                        "executor probe failed: no work goes to it until its address answers as it");
                } else {
                    info!(executor = %exec.id, epoch = exec.epoch, address = %exec.address, error = %e,
                        "executor of the store not heard from since this control plane started does not answer (a previous run's, gone or restarting); no work goes to it, and its lease decides");
                }
                false
            }
        }
    }

    /// Read-modify-write of a connector with retries on revision conflicts. `f` returns
    /// false to leave the record unchanged. Returns the stored record (None if absent).
    ///
    /// # Errors
    /// Store failures, or [`HerderError::Contended`].
    pub fn modify_connector<T>(
        &self,
        name: &str,
        mut f: impl FnMut(&mut ConnectorRecord) -> Option<T>,
    ) -> Result<Option<T>, HerderError> {
        for _ in 0..MODIFY_ATTEMPTS {
            let Some(mut rec) = self.store.connector(name)? else {
                return Ok(None);
            };
            let Some(out) = f(&mut rec) else {
                return Ok(None);
            };
            if self.store.put_connector(&rec)? {
                self.changed(name);
                return Ok(Some(out));
            }
        }
        Err(HerderError::Contended(name.to_owned()))
    }

    /// As [`Cluster::modify_connector`], but the write may share a commit with other
    /// writes ([`crate::store::StateStore::put_connector_batched`]); it has landed when
    /// this returns.
    ///
    /// # Errors
    /// Store failures, or [`HerderError::Contended`].
    pub async fn modify_connector_batched<T>(
        &self,
        name: &str,
        mut f: impl FnMut(&mut ConnectorRecord) -> Option<T>,
    ) -> Result<Option<T>, HerderError> {
        self.record_connector_batched(name, |r| f(r).map(|out| (out, true)))
            .await
    }

    /// As [`Cluster::modify_connector_batched`] for a write that records what executors
    /// answered or reported: `f` also says whether the herder has anything to do about it
    /// ([`crate::model::InstanceState::herder_acts_on`]). When it has not, the connector
    /// is not marked for the herder's next pass; watchers and the finalizer are told
    /// either way.
    ///
    /// # Errors
    /// Store failures, or [`HerderError::Contended`].
    pub async fn record_connector_batched<T>(
        &self,
        name: &str,
        mut f: impl FnMut(&mut ConnectorRecord) -> Option<(T, bool)>,
    ) -> Result<Option<T>, HerderError> {
        for _ in 0..MODIFY_ATTEMPTS {
            let Some(mut rec) = self.store.connector(name)? else {
                return Ok(None);
            };
            let Some((out, herder_acts)) = f(&mut rec) else {
                return Ok(None);
            };
            if self.store.put_connector_batched(rec).await? {
                if herder_acts {
                    self.changed(name);
                } else {
                    self.changed_unplanned(name);
                }
                return Ok(Some(out));
            }
        }
        Err(HerderError::Contended(name.to_owned()))
    }
}

impl Cluster {
    /// Keeps the Kafka cluster id an executor's heartbeat carried (empty: none).
    pub fn note_kafka_cluster_id(&self, id: &str) {
        if id.is_empty() {
            return;
        }
        let mut kept = self
            .kafka_cluster_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.as_deref() != Some(id) {
            *kept = Some(id.to_owned());
        }
    }

    /// The Kafka cluster id of the cluster's record log, once an executor on Kafka
    /// reported it since this control plane started.
    pub fn kafka_cluster_id(&self) -> Option<String> {
        self.kafka_cluster_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Whether a failed identity probe is worth a WARN: for a new registration (`fresh`) or
/// an executor heard from since this control plane started (`heard`), an operator must
/// look; an executor only known from the store (a previous run's, whose address may be
/// gone for good, as a restarted dev mode's executor on a new port) is INFO, and its
/// lease decides what becomes of it.
fn probe_failure_is_a_warning(fresh: bool, heard: bool) -> bool {
    fresh || heard
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn a_call_without_an_answer_counts_as_no_answer() {
        let e = CallError::Unreachable {
            address: "https://127.0.0.2:7001".into(),
            message: "presented the certificate of spiffe://wharf/executor/exec-1".into(),
        };
        let (failure, text) = call_failure(&e);
        assert_eq!(failure, CallFailure::NoAnswer);
        assert_eq!(text, e.to_string());
    }

    #[test]
    fn a_refused_call_counts_with_its_code() {
        let e = CallError::Refused {
            address: "https://127.0.0.2:7001".into(),
            code: Code::NotFound,
            message: "no".into(),
        };
        assert_eq!(call_failure(&e).0, CallFailure::Refused(Code::NotFound));
    }

    #[test]
    fn a_lease_is_adopted_only_for_an_executor_registered_at_that_epoch_and_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = crate::store::seal::Sealer::load_or_create(dir.path()).unwrap();
        let store: Arc<dyn crate::store::StateStore> =
            Arc::new(crate::store::RedbStore::open(&dir.path().join("s.redb"), sealer).unwrap());
        let cluster = Cluster::new(
            store.clone(),
            LeaseConfig {
                lease_ms: 10_000,
                heartbeat_interval_ms: 1_000,
            },
        )
        .unwrap();
        // Registered after this process granted its leases (through another replica).
        let e = store
            .register_executor("e1", "http://127.0.0.2:1", Vec::new())
            .unwrap();
        assert!(!cluster.holds_lease("e1", e.epoch));
        assert!(!cluster.adopt_lease("e1", e.epoch + 1), "another epoch");
        assert!(!cluster.adopt_lease("e2", e.epoch), "not registered");
        assert!(cluster.adopt_lease("e1", e.epoch));
        assert!(cluster.holds_lease("e1", e.epoch));
        // Lost in the store, and no lease here: not adopted back.
        let e3 = store
            .register_executor("e3", "http://127.0.0.4:1", Vec::new())
            .unwrap();
        assert!(store.mark_executor_lost("e3", e3.epoch).unwrap());
        assert!(!cluster.adopt_lease("e3", e3.epoch));
    }

    #[test]
    fn a_failed_probe_warns_for_a_registration_or_an_executor_heard_from() {
        assert!(super::probe_failure_is_a_warning(true, false));
        assert!(super::probe_failure_is_a_warning(false, true));
        assert!(super::probe_failure_is_a_warning(true, true));
    }

    #[test]
    fn a_failed_probe_of_an_executor_only_known_from_the_store_is_no_warning() {
        assert!(!super::probe_failure_is_a_warning(false, false));
    }
}
