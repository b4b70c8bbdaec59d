//! State shared by the herder, the finalizer and the gRPC services: the store, executor
//! clients, leases and how each executor is doing, the change feed and wake-ups.
//!
//! An executor is *live* while it holds its lease at its epoch and heartbeats on time,
//! *unresponsive* while it holds its lease but missed heartbeats
//! ([`UNRESPONSIVE_AFTER_HEARTBEATS`]), *lost* once the lease ran out or a newer epoch
//! registered ([`crate::plan::unit::Host`]). Work is placed only on live executors, and
//! an executor that the control plane cannot reach (a wrong `--advertise`) is retried with
//! jittered backoff ([`Cluster::reach_failed`]) and shown unreachable in ListExecutors.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, broadcast};
use tracing::{info, warn};

use super::client::{CallError, ExecutorClients};
use crate::model::{ConnectorRecord, ExecutorRecord};
use crate::model::{InstanceEvent, InstanceState};
use crate::plan::hosted::{self, InstanceKey, RecordedRunning};
use crate::plan::unit::Host;
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
/// Heartbeat intervals without a heartbeat after which a leased executor counts as
/// unresponsive: nothing new is placed on it and no call is sent to it.
pub const UNRESPONSIVE_AFTER_HEARTBEATS: u32 = 3;
/// First delay before calling an unreachable executor again, in milliseconds (doubles
/// per consecutive failure, jittered).
pub const REACH_BACKOFF_BASE_MS: u64 = 200;
/// Longest delay between calls to an unreachable executor, in milliseconds.
pub const REACH_BACKOFF_MAX_MS: u64 = 10_000;
/// Consecutive unreachable calls after which ListExecutors reports the executor
/// unreachable and no new work is placed on it.
pub const UNREACHABLE_AFTER_FAILURES: u32 = 3;
/// Leases an executor stays LOST (listed by ListExecutors) before it is forgotten.
pub const LOST_EXECUTOR_EXPIRY_LEASES: u32 = 5;
/// How often a pending call checks that its executor still holds its lease, in ms.
const LEASE_CHECK_INTERVAL_MS: u64 = 100;

/// Lease of one registered executor epoch, kept in memory: after a control-plane restart
/// every registered executor gets a fresh lease (it cannot have heartbeated to us).
#[derive(Debug, Clone)]
pub struct Lease {
    /// Epoch the lease is for.
    pub epoch: u64,
    /// When it runs out.
    pub expires: Instant,
    /// Last heartbeat, Unix ms (0 when none since this process started).
    pub last_heartbeat_ms: i64,
    /// Last sign of life: the grant, or the last heartbeat.
    pub last_seen: Instant,
}

/// Lease settings handed to executors.
#[derive(Debug, Clone, Copy)]
pub struct LeaseConfig {
    /// Lease length, in milliseconds.
    pub lease_ms: u32,
    /// Heartbeat interval, in milliseconds.
    pub heartbeat_interval_ms: u32,
}

/// State shared by the herder, the finalizer and the gRPC services.
pub struct Cluster {
    /// The store.
    pub store: Arc<dyn StateStore>,
    /// Executor calls.
    pub clients: ExecutorClients,
    /// Lease settings.
    pub lease: LeaseConfig,
    leases: Mutex<HashMap<String, Lease>>,
    pub(super) herder_wake: Notify,
    pub(super) finalizer_wake: Notify,
    changes: broadcast::Sender<String>,
    dirty: Mutex<Dirty>,
    pub(super) task_starts: tokio::sync::Semaphore,
    /// Executors the control plane could not reach, by id (see [`Cluster::reach_failed`]).
    reach: Mutex<HashMap<String, Reach>>,
    /// Executor epochs whose advertised address was found to answer as that executor
    /// ([`Cluster::verify`]), by id; only those take new work.
    verified: Mutex<HashMap<String, u64>>,
    /// Executors whose identity probe runs.
    probing: Mutex<HashSet<String>>,
    /// Executors whose heartbeat's status correction runs
    /// ([`Cluster::spawn_hosted_correction`]).
    correcting: Mutex<HashSet<String>>,
    /// Per executor: the epoch and time of its last heartbeat that reported what it
    /// hosts, and the instances recorded RUNNING there that it did not list
    /// ([`crate::plan::hosted`]).
    hosted_missing: Mutex<HashMap<String, HostedReport>>,
    /// The last walk of the instances recorded RUNNING: when it began, what it cost, and
    /// what it found (shared by heartbeats, [`hosted::walk_reusable`]).
    recorded_running: Mutex<Option<(Instant, Duration, Arc<RecordedRunning>)>>,
    /// Held by the one correction that walks; the others wait for its walk without
    /// holding a thread ([`Cluster::recorded_running`]).
    walking: tokio::sync::Mutex<()>,
    /// Lost executors (with the lost epoch) and since when this process saw them lost.
    lost_since: Mutex<HashMap<String, (u64, Instant)>>,
    /// Final records of recently finished deletions, by connector name, with when they
    /// finished: the store forgets a deletion in the write that ends it, and the DELETED
    /// event of WatchConnector still shows where each cleanup ran.
    finished: Mutex<HashMap<String, (Instant, crate::model::DeletionRecord)>>,
    /// Connectors whose finalizer task runs: a forced deletion ends in the store while a
    /// cleanup stop it skipped may still be in flight, and a connector created again under
    /// that name must not start before that stop ended (it would remove what the new one
    /// provisioned under the same names).
    cleanups_in_flight: Mutex<HashSet<String>>,
}

/// Marks an executor's correction ended when dropped
/// ([`Cluster::spawn_hosted_correction`]).
struct Correcting<'a>(&'a Cluster, &'a str);

impl Drop for Correcting<'_> {
    fn drop(&mut self) {
        self.0
            .correcting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(self.1);
    }
}

/// An executor's last heartbeat that reported what it hosts.
#[derive(Debug, Clone)]
struct HostedReport {
    /// The epoch it came from.
    epoch: u64,
    /// When it was judged.
    at: Instant,
    /// Instances recorded RUNNING there that it did not list.
    missing: std::collections::BTreeSet<InstanceKey>,
}

/// Calls to one executor that did not reach it, for backoff and reporting.
#[derive(Debug, Clone)]
struct Reach {
    /// Consecutive calls that did not reach it.
    failures: u32,
    /// No call before this.
    next_try: Instant,
    /// Error of the last one.
    last_error: String,
}

/// Delay before the next call after `failures` consecutive unreachable calls: doubling
/// from [`REACH_BACKOFF_BASE_MS`] up to [`REACH_BACKOFF_MAX_MS`], with "equal jitter"
/// (half fixed, half random) so that many units do not retry in step.
pub fn reach_backoff(failures: u32, random: f64) -> Duration {
    let full = REACH_BACKOFF_BASE_MS
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(REACH_BACKOFF_MAX_MS);
    let half = full / 2;
    Duration::from_millis(half + (half as f64 * random.clamp(0.0, 1.0)) as u64)
}

/// Which executor call a result comes from: a refusal means different things for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// StartConnector or StartTask.
    Start,
    /// StopConnector or StopTask.
    Stop,
    /// ComputeTaskConfigs.
    TaskConfigs,
    /// The identity probe of an executor not yet verified ([`Cluster::verify`]).
    Probe,
}

/// What a call's result says about the executor, for its backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReachVerdict {
    /// It answered as an executor doing its work does: the backoff ends.
    Answered,
    /// The call failed in a way that the same call made again at once would too: the
    /// next calls to this executor wait ([`reach_backoff`]), and after
    /// [`UNREACHABLE_AFTER_FAILURES`] in a row it is shown unreachable.
    Failed,
}

/// Decides whether a call's outcome (`None`: a response) counts against its executor.
///
/// Failed: no answer (unreachable, a timeout, a server whose certificate is someone
/// else's); a start or task-config call refused with FAILED_PRECONDITION or NOT_FOUND (the
/// executor is at another epoch, fenced, or not hosting the instance: the start was not
/// taken, and retrying it every pass is the hot loop of issue 15 point 6); any call
/// refused with UNAUTHENTICATED or PERMISSION_DENIED (the executor does not accept this
/// control plane); a probe refused for any reason (it did not show the executor is
/// there). Answered: a response, a stop's FAILED_PRECONDITION or NOT_FOUND (no
/// instance of that generation is there, which is what the stop wanted), and any other
/// refusal (the plugin's or the request's problem, recorded on the instance, not the
/// executor's).
pub fn reach_verdict(kind: CallKind, error: Option<&CallError>) -> ReachVerdict {
    use tonic::Code;
    let Some(error) = error else {
        return ReachVerdict::Answered;
    };
    match (kind, error.code()) {
        (_, None) | (CallKind::Probe, Some(_)) => ReachVerdict::Failed,
        (_, Some(Code::Unauthenticated | Code::PermissionDenied)) => ReachVerdict::Failed,
        (
            CallKind::Start | CallKind::TaskConfigs,
            Some(Code::FailedPrecondition | Code::NotFound),
        ) => ReachVerdict::Failed,
        (CallKind::Stop, Some(Code::FailedPrecondition | Code::NotFound)) => ReachVerdict::Answered,
        (_, Some(_)) => ReachVerdict::Answered,
    }
}

/// A snapshot of every registered executor and how it is doing, taken once per pass so
/// that decisions read facts, not the store.
#[derive(Debug, Clone, Default)]
pub struct ExecutorView {
    /// Every registered executor, by id.
    pub all: BTreeMap<String, ExecutorRecord>,
    /// Health of each, by id (see [`Host`]).
    pub health: BTreeMap<String, Host>,
    /// Ids that new work may go to: live and reachable.
    pub placeable: std::collections::BTreeSet<String>,
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

    /// Live executors, by id.
    pub fn live_map(&self) -> BTreeMap<String, ExecutorRecord> {
        self.all
            .iter()
            .filter(|(id, _)| self.health.get(*id) == Some(&Host::Live))
            .map(|(id, e)| (id.clone(), e.clone()))
            .collect()
    }
}

/// How long the final record of a finished deletion is kept for watchers, in milliseconds.
const FINISHED_DELETION_KEEP_MS: u64 = 60_000;

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

impl Cluster {
    /// A cluster view over `store`; every executor already registered gets a fresh lease.
    ///
    /// # Errors
    /// When the store cannot be read.
    pub fn new(store: Arc<dyn StateStore>, lease: LeaseConfig) -> Result<Arc<Self>, StoreError> {
        let (changes, _) = broadcast::channel(CHANGE_FEED_CAPACITY);
        let mut leases = HashMap::new();
        for e in store.executors()? {
            if !e.lost {
                leases.insert(
                    e.id.clone(),
                    Lease {
                        epoch: e.epoch,
                        expires: Instant::now() + Duration::from_millis(u64::from(lease.lease_ms)),
                        last_heartbeat_ms: 0,
                        last_seen: Instant::now(),
                    },
                );
            }
        }
        Ok(Arc::new(Self {
            store,
            clients: ExecutorClients::default(),
            lease,
            leases: Mutex::new(leases),
            herder_wake: Notify::new(),
            finalizer_wake: Notify::new(),
            finished: Mutex::new(HashMap::new()),
            cleanups_in_flight: Mutex::new(HashSet::new()),
            changes,
            dirty: Mutex::new(Dirty {
                names: HashSet::new(),
                all: true,
            }),
            task_starts: tokio::sync::Semaphore::new(MAX_TASK_STARTS_IN_FLIGHT),
            reach: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashMap::new()),
            probing: Mutex::new(HashSet::new()),
            correcting: Mutex::new(HashSet::new()),
            hosted_missing: Mutex::new(HashMap::new()),
            recorded_running: Mutex::new(None),
            walking: tokio::sync::Mutex::new(()),
            lost_since: Mutex::new(HashMap::new()),
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

    /// Keeps the final record of a deletion that just finished (see
    /// [`Cluster::finished_deletion`]); records older than a minute are dropped.
    pub fn record_finished_deletion(&self, d: &crate::model::DeletionRecord) {
        let mut finished = self
            .finished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let keep = Duration::from_millis(FINISHED_DELETION_KEEP_MS);
        finished.retain(|_, (at, _)| at.elapsed() < keep);
        finished.insert(d.name.clone(), (Instant::now(), d.clone()));
    }

    /// The final record of `name`'s deletion if it finished within the last minute: every
    /// step as it ended (DONE or SKIPPED, with executor, generation and attempts).
    pub fn finished_deletion(&self, name: &str) -> Option<crate::model::DeletionRecord> {
        let finished = self
            .finished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        finished
            .get(name)
            .filter(|(at, _)| at.elapsed() < Duration::from_millis(FINISHED_DELETION_KEEP_MS))
            .map(|(_, d)| d.clone())
    }

    /// Marks `name`'s finalizer task as running (`true`) or ended (`false`).
    pub fn set_cleanup_in_flight(&self, name: &str, running: bool) {
        let mut set = self
            .cleanups_in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if running {
            set.insert(name.to_owned());
        } else {
            set.remove(name);
        }
    }

    /// True while a finalizer task of `name` runs (see [`Cluster::set_cleanup_in_flight`]).
    pub fn cleanup_in_flight(&self, name: &str) -> bool {
        self.cleanups_in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(name)
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

    fn leases(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lease>> {
        self.leases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a lease for a newly registered epoch. Its backoff is not reset here: a
    /// registration resets it in [`Cluster::verify`], before the probe that may record
    /// a failure again.
    pub fn grant_lease(&self, id: &str, epoch: u64) {
        self.leases()
            .insert(id.to_owned(), self.lease_from_now(epoch));
        self.wake();
    }

    /// A lease at `epoch` that runs one lease length from now, heard from now.
    fn lease_from_now(&self, epoch: u64) -> Lease {
        Lease {
            epoch,
            expires: Instant::now() + Duration::from_millis(u64::from(self.lease.lease_ms)),
            last_heartbeat_ms: now_ms(),
            last_seen: Instant::now(),
        }
    }

    /// Renews the lease of `id` at `epoch`; false when that epoch holds no lease (fenced
    /// or expired).
    pub fn renew_lease(&self, id: &str, epoch: u64) -> bool {
        let mut leases = self.leases();
        match leases.get_mut(id) {
            Some(l) if l.epoch == epoch && l.expires > Instant::now() => {
                l.expires = Instant::now() + Duration::from_millis(u64::from(self.lease.lease_ms));
                l.last_heartbeat_ms = now_ms();
                let was_silent = l.last_seen.elapsed() >= self.unresponsive_after();
                l.last_seen = Instant::now();
                drop(leases);
                if was_silent {
                    // It answers again: work may be placed on it.
                    self.wake();
                }
                true
            }
            Some(_) | None => false,
        }
    }

    /// Grants `id` a lease at `epoch` when this process holds none for it at all and the
    /// store has it registered at `epoch`, not lost; true when it did. Why: a replica
    /// that just became leader grants the term's leases from the store right after its
    /// role changed ([`Cluster::new`] does the same at a start), and a heartbeat or an
    /// offset commit arriving in between was refused as fenced, which fenced the
    /// executor and restarted its work (seen 1 ms into a term in an operator's rolling
    /// restart). An executor whose lease ran out keeps its entry until the store marks it
    /// lost, so it is never adopted back; a store that does not answer adopts nothing.
    pub fn adopt_lease(&self, id: &str, epoch: u64) -> bool {
        if self.leases().contains_key(id) {
            return false;
        }
        match self.store.executor(id) {
            Ok(Some(e)) if e.epoch == epoch && !e.lost => {
                match self.leases().entry(id.to_owned()) {
                    // Granted meanwhile (the term's grants, a registration): not replaced.
                    std::collections::hash_map::Entry::Occupied(held) => {
                        return held.get().epoch == epoch;
                    }
                    std::collections::hash_map::Entry::Vacant(free) => {
                        free.insert(self.lease_from_now(epoch));
                    }
                }
                info!(executor = %id, epoch, "lease adopted from the store (new term)");
                self.wake();
                true
            }
            Ok(_) | Err(_) => false,
        }
    }

    /// True when `id` holds a current lease at `epoch`.
    pub fn holds_lease(&self, id: &str, epoch: u64) -> bool {
        self.leases()
            .get(id)
            .is_some_and(|l| l.epoch == epoch && l.expires > Instant::now())
    }

    /// Last heartbeat of `id`, Unix ms (0 when none since this process started).
    pub fn last_heartbeat_ms(&self, id: &str) -> i64 {
        self.leases().get(id).map_or(0, |l| l.last_heartbeat_ms)
    }

    /// Marks every executor whose lease ran out as lost (fencing its epoch).
    pub(super) fn expire_leases(&self) -> Result<(), StoreError> {
        let expired: Vec<(String, u64)> = self
            .leases()
            .iter()
            .filter(|(_, l)| l.expires <= Instant::now())
            .map(|(id, l)| (id.clone(), l.epoch))
            .collect();
        for (id, epoch) in expired {
            if self.store.mark_executor_lost(&id, epoch)? {
                warn!(executor = %id, epoch, "executor lease expired; marked lost, its work moves");
                crate::observe::lease_expired();
            }
            let mut leases = self.leases();
            if leases.get(&id).is_some_and(|l| l.epoch == epoch) {
                leases.remove(&id);
            }
        }
        self.forget_long_lost()
    }

    /// Forgets executors that stayed lost for [`LOST_EXECUTOR_EXPIRY_LEASES`] leases (a
    /// cleanly stopped executor does not stay LOST in ListExecutors forever). Its epoch is
    /// fenced already and nothing is placed on a lost executor, so only the listing
    /// changes; an executor that registers again gets a new record.
    fn forget_long_lost(&self) -> Result<(), StoreError> {
        let keep =
            Duration::from_millis(u64::from(self.lease.lease_ms)) * LOST_EXECUTOR_EXPIRY_LEASES;
        let lost: Vec<(String, u64)> = self
            .store
            .executors()?
            .into_iter()
            .filter(|e| e.lost)
            .map(|e| (e.id, e.epoch))
            .collect();
        let expired: Vec<(String, u64)> = {
            let mut since = self
                .lost_since
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            since.retain(|id, (epoch, _)| lost.iter().any(|(i, e)| i == id && e == epoch));
            for (id, epoch) in &lost {
                since
                    .entry(id.clone())
                    .or_insert_with(|| (*epoch, Instant::now()));
            }
            since
                .iter()
                .filter(|(_, (_, at))| at.elapsed() >= keep)
                .map(|(id, (epoch, _))| (id.clone(), *epoch))
                .collect()
        };
        for (id, epoch) in expired {
            if self.store.forget_executor(&id, epoch)? {
                info!(executor = %id, epoch, lost_for_ms = keep.as_millis() as u64,
                    "lost executor forgotten");
            }
        }
        Ok(())
    }

    /// Registered executors holding a current lease, by id.
    ///
    /// # Errors
    /// When the store cannot be read.
    pub fn live_executors(&self) -> Result<BTreeMap<String, ExecutorRecord>, StoreError> {
        Ok(self
            .store
            .executors()?
            .into_iter()
            .filter(|e| !e.lost && self.holds_lease(&e.id, e.epoch))
            .map(|e| (e.id.clone(), e))
            .collect())
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
    /// Time without a heartbeat after which a leased executor is unresponsive.
    pub fn unresponsive_after(&self) -> Duration {
        Duration::from_millis(
            u64::from(self.lease.heartbeat_interval_ms) * u64::from(UNRESPONSIVE_AFTER_HEARTBEATS),
        )
    }

    /// Every executor and how it is doing, from the store and the leases.
    ///
    /// An executor whose lease ran out but that is not marked lost yet counts as
    /// unresponsive (its instances may still run until it fences itself), not lost.
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
        let silent_after = self.unresponsive_after();
        let now = Instant::now();
        let mut health = BTreeMap::new();
        {
            let leases = self.leases();
            for (id, e) in &all {
                let h = match leases.get(id).filter(|l| l.epoch == e.epoch) {
                    _ if e.lost => Host::Lost,
                    None => Host::Lost,
                    Some(l) if l.expires <= now => Host::Unresponsive,
                    Some(l) if now.duration_since(l.last_seen) >= silent_after => {
                        Host::Unresponsive
                    }
                    Some(_) => Host::Live,
                };
                health.insert(id.clone(), h);
            }
        }
        let placeable = all
            .values()
            .filter(|e| {
                health.get(&e.id) == Some(&Host::Live)
                    && !self.unreachable(&e.id)
                    && self.is_verified(&e.id, e.epoch)
            })
            .map(|e| e.id.clone())
            .collect();
        Ok(ExecutorView {
            all,
            health,
            placeable,
        })
    }

    fn reach(&self) -> std::sync::MutexGuard<'_, HashMap<String, Reach>> {
        self.reach
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a call to `id` that did not reach it; later calls wait for the backoff.
    pub fn reach_failed(&self, id: &str, error: &str) {
        let mut reach = self.reach();
        let r = reach.entry(id.to_owned()).or_insert(Reach {
            failures: 0,
            next_try: Instant::now(),
            last_error: String::new(),
        });
        r.failures = r.failures.saturating_add(1);
        r.next_try = Instant::now() + reach_backoff(r.failures, rand::random::<f64>());
        r.last_error = error.to_owned();
        if r.failures == UNREACHABLE_AFTER_FAILURES {
            warn!(executor = %id, error = %error, "executor unreachable at its advertised address; retrying with backoff");
        }
    }

    /// True once `id` at `epoch` was found at its advertised address ([`Cluster::verify`]).
    pub fn is_verified(&self, id: &str, epoch: u64) -> bool {
        self.verified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            == Some(&epoch)
    }

    /// Checks that the process at `exec`'s advertised address is `exec` (over TLS its
    /// certificate names `exec.id`; its ListAssignments answer names `exec.id`), bounded by
    /// [`super::client::PROBE_TIMEOUT_MS`]. Until this succeeds for an epoch, no new work is
    /// placed on it: a process holding one executor's certificate that registers another's
    /// address gets nothing, and takes nothing away from the executor really there (no
    /// rebalance toward it). A failure counts in its backoff and, repeated, shows it
    /// unreachable with the reason; the herder probes again after the backoff
    /// ([`Cluster::probe_due`]). `fresh`: a new registration, whose backoff starts over.
    pub async fn verify(&self, exec: &ExecutorRecord, fresh: bool) -> bool {
        if fresh {
            self.reach_ok(&exec.id);
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
                self.verified
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(exec.id.clone(), exec.epoch);
                self.wake();
                true
            }
            Err(e) => {
                warn!(executor = %exec.id, epoch = exec.epoch, address = %exec.address, error = %e,
                    "executor probe failed: no work goes to it until its address answers as it");
                false
            }
        }
    }

    /// True when `exec` (live) still needs its identity probe, none runs, and its backoff
    /// allows one; marks it probing (the caller runs [`Cluster::verify`] and then
    /// [`Cluster::probe_done`]).
    pub fn probe_due(&self, exec: &ExecutorRecord) -> bool {
        if self.is_verified(&exec.id, exec.epoch) || self.reach_blocked(&exec.id) {
            return false;
        }
        self.probing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(exec.id.clone())
    }

    /// Ends a probe begun by [`Cluster::probe_due`].
    pub fn probe_done(&self, id: &str) {
        self.probing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    /// Records an answer from `id`: its backoff ends.
    pub fn reach_ok(&self, id: &str) {
        if self
            .reach()
            .remove(id)
            .is_some_and(|r| r.failures >= UNREACHABLE_AFTER_FAILURES)
        {
            info!(executor = %id, "executor reachable again");
        }
    }

    /// True while calls to `id` wait for their backoff.
    pub fn reach_blocked(&self, id: &str) -> bool {
        self.reach()
            .get(id)
            .is_some_and(|r| r.next_try > Instant::now())
    }

    /// True after [`UNREACHABLE_AFTER_FAILURES`] consecutive calls did not reach `id`.
    pub fn unreachable(&self, id: &str) -> bool {
        self.reach()
            .get(id)
            .is_some_and(|r| r.failures >= UNREACHABLE_AFTER_FAILURES)
    }

    /// The last error of an unreachable executor (empty when it is not).
    pub fn unreachable_error(&self, id: &str) -> String {
        self.reach()
            .get(id)
            .filter(|r| r.failures >= UNREACHABLE_AFTER_FAILURES)
            .map(|r| r.last_error.clone())
            .unwrap_or_default()
    }

    /// Returns once `exec` no longer holds a lease at its epoch: a call pending on it is
    /// then abandoned (the host is fenced), so that a frozen executor holds up nothing
    /// longer than its lease.
    pub async fn lease_lost(&self, exec: &ExecutorRecord) {
        while self.holds_lease(&exec.id, exec.epoch) {
            tokio::time::sleep(Duration::from_millis(LEASE_CHECK_INTERVAL_MS)).await;
        }
    }

    /// Returns once executor `id` holds no lease at any epoch (its lease ran out and it did
    /// not register again). A stop sent under an older epoch of an executor that
    /// registered again since is still answered (from the record of the stop it already
    /// ran, or refused), so waiting for that answer is safe, and abandoning it would
    /// re-host a cleanup that already ran (docs/contract.md, "Executor self-fencing").
    pub async fn lease_lost_at_every_epoch(&self, id: &str) {
        let held = || {
            self.leases()
                .get(id)
                .is_some_and(|l| l.expires > Instant::now())
        };
        while held() {
            tokio::time::sleep(Duration::from_millis(LEASE_CHECK_INTERVAL_MS)).await;
        }
    }

    /// Runs `call` to `exec`, abandoned (as unreachable) once `exec` loses its lease, so
    /// that no call to a frozen executor holds anything up longer than its lease; records
    /// whether it reached the executor ([`Cluster::reach_failed`], [`Cluster::reach_ok`]).
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

    /// Records what a call's outcome says about `exec` ([`reach_verdict`]): a failure
    /// starts or lengthens its backoff, an answer ends it.
    pub fn note_reach(&self, exec: &ExecutorRecord, kind: CallKind, error: Option<&CallError>) {
        match (reach_verdict(kind, error), error) {
            (ReachVerdict::Failed, Some(e)) => self.reach_failed(&exec.id, &e.to_string()),
            (ReachVerdict::Failed, None) | (ReachVerdict::Answered, _) => self.reach_ok(&exec.id),
        }
    }

    /// The instances recorded RUNNING, by executor and epoch: a fresh walk of the cluster,
    /// or the last one while [`hosted::walk_reusable`] says so. One correction walks at a
    /// time and the others reuse its walk; they wait on an async lock, so a walk that
    /// waits on the store (an etcd that stopped answering: up to its call timeout) holds
    /// no other thread.
    async fn recorded_running(&self) -> Result<Arc<RecordedRunning>, StoreError> {
        let _walking = self.walking.lock().await;
        let interval = Duration::from_millis(u64::from(self.lease.heartbeat_interval_ms));
        let last = || {
            self.recorded_running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some((built, cost, walk)) = &*last()
            && hosted::walk_reusable(built.elapsed(), *cost, interval)
        {
            return Ok(walk.clone());
        }
        let began = Instant::now();
        let records = self.store.connectors_shared()?;
        let walk = Arc::new(RecordedRunning::walk(records.iter().map(AsRef::as_ref)));
        *last() = Some((began, began.elapsed(), walk.clone()));
        Ok(walk)
    }

    /// Runs [`Cluster::reconcile_hosted`] for a heartbeat apart from its answer, at most
    /// one at a time per executor; a heartbeat that finds one running leaves its list
    /// (the next beat lists again). Why apart: the answer renews the executor's lease,
    /// and a correction waits on the store (with etcd that stopped answering, up to 5 s,
    /// as long as the executor waits for the answer); executors whose heartbeats all
    /// timed out fenced themselves and stopped every task while the control plane held
    /// their leases.
    pub fn spawn_hosted_correction(
        self: &Arc<Self>,
        executor: String,
        epoch: u64,
        hosted: std::collections::BTreeSet<InstanceKey>,
    ) {
        let started = self
            .correcting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(executor.clone());
        if !started {
            return;
        }
        let cluster = self.clone();
        wharf::task::spawn(
            wharf::task::TaskKind::Detached,
            "hosted correction",
            async move {
                // Ends the correction even when it panicked.
                let _done = Correcting(&cluster, &executor);
                if let Err(e) = cluster.reconcile_hosted(&executor, epoch, hosted).await {
                    warn!(executor = %executor, error = %e, "status correction from heartbeat failed; retried on a later heartbeat");
                }
            },
        );
    }

    /// True when `executor`'s last heartbeat at `epoch`, judged after `since`, listed
    /// every instance recorded RUNNING on it: the records of that executor are confirmed
    /// (the herder's catch-up, [`super::herder::catch_up`]).
    pub fn hosted_confirmed(&self, executor: &str, epoch: u64, since: Instant) -> bool {
        self.hosted_missing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(executor)
            .is_some_and(|r| r.epoch == epoch && r.at >= since && r.missing.is_empty())
    }

    /// Corrects the status from a heartbeat that lists everything `executor` (at `epoch`)
    /// hosts: an instance recorded RUNNING there that two heartbeats in a row did not list
    /// is recorded unassigned, so the herder starts it again (issue 15, point 7).
    ///
    /// # Errors
    /// Store failures.
    pub async fn reconcile_hosted(
        &self,
        executor: &str,
        epoch: u64,
        hosted: std::collections::BTreeSet<InstanceKey>,
    ) -> Result<(), HerderError> {
        let now = self
            .recorded_running()
            .await?
            .missing(executor, epoch, &hosted);
        let gone = {
            let mut map = self
                .hosted_missing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let previous = map
                .insert(
                    executor.to_owned(),
                    HostedReport {
                        epoch,
                        at: Instant::now(),
                        missing: now.clone(),
                    },
                )
                .filter(|p| p.epoch == epoch)
                .map(|p| p.missing)
                .unwrap_or_default();
            hosted::gone(&previous, &now)
        };
        for (name, task, generation) in gone {
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
                    cur.state = cur.state.on(InstanceEvent::Unassigned);
                    cur.executor = None;
                    cur.epoch = 0;
                    cur.error = format!(
                        "instance of generation {generation} no longer hosted by executor {executor}"
                    );
                    Some(())
                })
                .await?;
            if changed.is_some() {
                warn!(connector = %name, task = task, generation, executor = %executor,
                    "executor no longer hosts this instance; status corrected, the herder starts it again");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn refused(code: Code) -> CallError {
        CallError::Refused {
            address: "https://127.0.0.2:7001".into(),
            code,
            message: "no".into(),
        }
    }

    fn unreachable() -> CallError {
        CallError::Unreachable {
            address: "https://127.0.0.2:7001".into(),
            message: "presented the certificate of spiffe://wharf/executor/exec-1".into(),
        }
    }

    const KINDS: [CallKind; 4] = [
        CallKind::Start,
        CallKind::Stop,
        CallKind::TaskConfigs,
        CallKind::Probe,
    ];

    #[test]
    fn a_probe_refused_for_any_reason_fails() {
        for code in [
            Code::PermissionDenied,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::InvalidArgument,
            Code::Internal,
        ] {
            assert_eq!(
                reach_verdict(CallKind::Probe, Some(&refused(code))),
                ReachVerdict::Failed,
                "{code:?}"
            );
        }
    }

    #[test]
    fn a_response_is_an_answer_for_every_kind() {
        for kind in KINDS {
            assert_eq!(
                reach_verdict(kind, None),
                ReachVerdict::Answered,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn no_answer_fails_for_every_kind() {
        for kind in KINDS {
            assert_eq!(
                reach_verdict(kind, Some(&unreachable())),
                ReachVerdict::Failed,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn an_executor_that_does_not_accept_the_control_plane_fails_every_kind() {
        for kind in KINDS {
            for code in [Code::Unauthenticated, Code::PermissionDenied] {
                assert_eq!(
                    reach_verdict(kind, Some(&refused(code))),
                    ReachVerdict::Failed,
                    "{kind:?} {code:?}"
                );
            }
        }
    }

    #[test]
    fn a_start_or_task_config_call_not_taken_fails() {
        for kind in [CallKind::Start, CallKind::TaskConfigs] {
            for code in [Code::FailedPrecondition, Code::NotFound] {
                assert_eq!(
                    reach_verdict(kind, Some(&refused(code))),
                    ReachVerdict::Failed,
                    "{kind:?} {code:?}"
                );
            }
        }
    }

    #[test]
    fn a_stop_finding_nothing_of_its_generation_is_an_answer() {
        for code in [Code::FailedPrecondition, Code::NotFound] {
            assert_eq!(
                reach_verdict(CallKind::Stop, Some(&refused(code))),
                ReachVerdict::Answered,
                "{code:?}"
            );
        }
    }

    #[test]
    fn other_refusals_are_answers() {
        for kind in [CallKind::Start, CallKind::Stop, CallKind::TaskConfigs] {
            for code in [Code::InvalidArgument, Code::Internal, Code::AlreadyExists] {
                assert_eq!(
                    reach_verdict(kind, Some(&refused(code))),
                    ReachVerdict::Answered,
                    "{kind:?} {code:?}"
                );
            }
        }
    }

    #[test]
    fn the_backoff_doubles_with_jitter_up_to_its_cap() {
        let ms = |failures, random| reach_backoff(failures, random).as_millis() as u64;
        // Half fixed, half random.
        assert_eq!(ms(1, 0.0), REACH_BACKOFF_BASE_MS / 2);
        assert_eq!(ms(1, 1.0), REACH_BACKOFF_BASE_MS);
        assert_eq!(ms(2, 1.0), REACH_BACKOFF_BASE_MS * 2);
        assert_eq!(ms(3, 1.0), REACH_BACKOFF_BASE_MS * 4);
        // Capped, however many failures.
        assert_eq!(ms(40, 1.0), REACH_BACKOFF_MAX_MS);
        assert_eq!(ms(u32::MAX, 0.0), REACH_BACKOFF_MAX_MS / 2);
        // Random values outside [0, 1] are clamped.
        assert_eq!(ms(1, 7.0), REACH_BACKOFF_BASE_MS);
        assert_eq!(ms(1, -3.0), REACH_BACKOFF_BASE_MS / 2);
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
}
