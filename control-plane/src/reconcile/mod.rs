//! The herder: one loop that turns target states and live executors into placements,
//! calls executors, and records what happened. Deletions are the finalizer's
//! ([`finalizer`]); the herder never touches a connector marked deleting.
//!
//! Every start is recorded before it is sent (executor, epoch, new generation, state
//! RESTARTING), so that a deletion sealed at any moment knows where an instance may run.
//!
//! A pass reconciles only the connectors that changed since the last one (marked by
//! [`Cluster::changed`]); every connector when the set of live executors changed, when
//! the loop woke on its timer (nothing happened for [`RECONCILE_INTERVAL_MS`]), on
//! [`Cluster::wake`], and at least every [`FULL_PASS_INTERVAL_MS`] as a safety net. The
//! placement plan always covers every connector, so load stays even. The herder's writes
//! go through [`crate::store::StateStore::put_connector_batched`], so the writes of all the
//! connectors a pass works on share commits.

pub mod client;
pub mod fault;
pub mod finalizer;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wharf::pb::v1 as pb;

use crate::model::{
    ConnectorRecord, ExecutorRecord, Instance, InstanceEvent, InstanceState, TargetState,
};
use crate::plan::{self, LiveExecutor, Unit, UnitKey};
use crate::store::{StateStore, StoreError};
use client::{CallError, ExecutorClients};

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

/// Lease of one registered executor epoch, kept in memory: after a control-plane restart
/// every registered executor gets a fresh lease (it cannot have heartbeated to us).
#[derive(Debug, Clone)]
pub struct Lease {
    /// Epoch the lease is for.
    pub epoch: u64,
    /// When it runs out.
    pub expires: Instant,
    /// Last heartbeat, Unix ms.
    pub last_heartbeat_ms: i64,
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
    herder_wake: Notify,
    finalizer_wake: Notify,
    changes: broadcast::Sender<String>,
    dirty: Mutex<Dirty>,
    task_starts: tokio::sync::Semaphore,
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

/// How long the final record of a finished deletion is kept for watchers, in milliseconds.
const FINISHED_DELETION_KEEP_MS: u64 = 60_000;

/// What the next herder pass must look at.
#[derive(Debug, Default)]
struct Dirty {
    /// Connectors changed since the last pass took the set.
    names: HashSet<String>,
    /// Every connector.
    all: bool,
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

    fn dirty(&self) -> std::sync::MutexGuard<'_, Dirty> {
        self.dirty
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `name` for the herder's next pass without waking it.
    fn mark_dirty(&self, name: &str) {
        let mut d = self.dirty();
        if !d.all {
            d.names.insert(name.to_owned());
        }
    }

    /// Makes the herder's next pass cover every connector.
    fn mark_all_dirty(&self) {
        let mut d = self.dirty();
        d.all = true;
        d.names.clear();
    }

    fn take_dirty(&self) -> Dirty {
        std::mem::take(&mut *self.dirty())
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

    /// Starts a lease for a newly registered epoch.
    pub fn grant_lease(&self, id: &str, epoch: u64) {
        self.leases().insert(
            id.to_owned(),
            Lease {
                epoch,
                expires: Instant::now() + Duration::from_millis(u64::from(self.lease.lease_ms)),
                last_heartbeat_ms: now_ms(),
            },
        );
        self.wake();
    }

    /// Renews the lease of `id` at `epoch`; false when that epoch holds no lease (fenced
    /// or expired).
    pub fn renew_lease(&self, id: &str, epoch: u64) -> bool {
        let mut leases = self.leases();
        match leases.get_mut(id) {
            Some(l) if l.epoch == epoch && l.expires > Instant::now() => {
                l.expires = Instant::now() + Duration::from_millis(u64::from(self.lease.lease_ms));
                l.last_heartbeat_ms = now_ms();
                true
            }
            Some(_) | None => false,
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
    fn expire_leases(&self) -> Result<(), StoreError> {
        let expired: Vec<(String, u64)> = self
            .leases()
            .iter()
            .filter(|(_, l)| l.expires <= Instant::now())
            .map(|(id, l)| (id.clone(), l.epoch))
            .collect();
        for (id, epoch) in expired {
            if self.store.mark_executor_lost(&id, epoch)? {
                warn!(executor = %id, epoch, "executor lease expired; marked lost, its work moves");
            }
            let mut leases = self.leases();
            if leases.get(&id).is_some_and(|l| l.epoch == epoch) {
                leases.remove(&id);
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
        for _ in 0..MODIFY_ATTEMPTS {
            let Some(mut rec) = self.store.connector(name)? else {
                return Ok(None);
            };
            let Some(out) = f(&mut rec) else {
                return Ok(None);
            };
            if self.store.put_connector_batched(rec).await? {
                self.changed(name);
                return Ok(Some(out));
            }
        }
        Err(HerderError::Contended(name.to_owned()))
    }
}

/// What the herder remembers between passes.
#[derive(Debug, Default)]
struct HerderMemory {
    /// Live executors (id, epoch) of the last pass.
    live: Vec<(String, u64)>,
    /// When the last pass over every connector began.
    last_full: Option<Instant>,
}

/// Runs the herder until `cancel` fires. Errors are logged and retried on the next pass;
/// they never end the loop.
pub async fn run_herder(cluster: Arc<Cluster>, cancel: CancellationToken) {
    let mut memory = HerderMemory::default();
    let mut timer = true;
    loop {
        if let Err(e) = herder_pass(&cluster, &mut memory, timer).await {
            warn!(error = %e, "herder pass failed; retrying");
            cluster.mark_all_dirty();
        }
        timer = tokio::select! {
            () = cancel.cancelled() => return,
            () = cluster.herder_wake.notified() => false,
            () = tokio::time::sleep(Duration::from_millis(RECONCILE_INTERVAL_MS)) => true,
        };
    }
}

/// True when the executor may still hold an instance in this state: a running one, or a
/// failed one (kept until stopped); a replacement is preceded by stop(false).
fn may_hold_instance(state: InstanceState) -> bool {
    state.has_live_instance() || state == InstanceState::Failed
}

fn is_live(inst: &Instance, live: &BTreeMap<String, ExecutorRecord>) -> bool {
    inst.executor
        .as_ref()
        .and_then(|id| live.get(id))
        .is_some_and(|e| e.epoch == inst.epoch)
}

/// One pass; `timer`: the loop woke because nothing happened for a while.
async fn herder_pass(
    cluster: &Cluster,
    memory: &mut HerderMemory,
    timer: bool,
) -> Result<(), HerderError> {
    // Taken first: a change after this point marks its connector for the next pass.
    let dirty = cluster.take_dirty();
    cluster.expire_leases()?;
    let live = cluster.live_executors()?;
    let live_now: Vec<(String, u64)> = live.values().map(|e| (e.id.clone(), e.epoch)).collect();
    let full = timer
        || dirty.all
        || live_now != memory.live
        || memory
            .last_full
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(FULL_PASS_INTERVAL_MS));
    memory.live = live_now;
    if full {
        memory.last_full = Some(Instant::now());
    }
    let connectors: Vec<Arc<ConnectorRecord>> = cluster
        .store
        .connectors_shared()?
        .into_iter()
        .filter(|c| !c.deleting)
        .collect();

    // One global plan, so that load evens out over connectors.
    let mut units = Vec::new();
    for c in &connectors {
        if c.target == TargetState::Stopped {
            continue;
        }
        let current = |i: &Instance| is_live(i, &live).then(|| i.executor.clone()).flatten();
        units.push(Unit {
            key: UnitKey {
                connector: c.name.clone(),
                task: None,
            },
            plugin: c.plugin.clone(),
            current: current(&c.connector),
        });
        for (i, t) in c.tasks.iter().enumerate() {
            units.push(Unit {
                key: UnitKey {
                    connector: c.name.clone(),
                    task: Some(i as u32),
                },
                plugin: c.plugin.clone(),
                current: current(t),
            });
        }
    }
    let live_execs: Vec<LiveExecutor> = live
        .values()
        .map(|e| LiveExecutor {
            id: e.id.clone(),
            plugins: e.plugins.iter().map(|p| p.name.clone()).collect(),
        })
        .collect();
    let mut desired: HashMap<UnitKey, Option<String>> = units
        .iter()
        .map(|u| (u.key.clone(), u.current.clone()))
        .collect();
    for m in plan::plan_assignments(&units, &live_execs) {
        desired.insert(m.key, m.to);
    }

    // Connectors are independent (each write is conditional on its own record), so a slow
    // or frozen executor holds up only the connectors it hosts.
    let passes = connectors
        .iter()
        .filter(|c| full || dirty.names.contains(&c.name))
        .map(|c| {
            let (live, desired) = (&live, &desired);
            async move {
                if let Err(e) = reconcile_connector(cluster, &c.name, live, desired).await {
                    warn!(connector = %c.name, error = %e, "reconcile failed; retrying");
                    cluster.mark_dirty(&c.name);
                }
            }
        });
    futures::future::join_all(passes).await;
    Ok(())
}

/// What to do with one unit after reading the record.
enum Step {
    Nothing,
    /// Stop it (if it runs) and record it PAUSED on `executor`.
    Pause {
        executor: String,
        generation: u64,
    },
    Start {
        to: Option<String>,
    },
}

#[tracing::instrument(skip(cluster, live, desired), level = "debug")]
async fn reconcile_connector(
    cluster: &Cluster,
    name: &str,
    live: &BTreeMap<String, ExecutorRecord>,
    desired: &HashMap<UnitKey, Option<String>>,
) -> Result<(), HerderError> {
    let Some(rec) = cluster.store.connector_shared(name)? else {
        return Ok(());
    };
    if rec.deleting {
        return Ok(());
    }
    let want = |task: Option<u32>| {
        desired
            .get(&UnitKey {
                connector: name.to_owned(),
                task,
            })
            .cloned()
            .flatten()
    };

    if rec.target == TargetState::Stopped {
        for (i, t) in rec.tasks.iter().enumerate() {
            if t.state != InstanceState::Stopped {
                stop_unit(
                    cluster,
                    &rec,
                    Some(i as u32),
                    t,
                    live,
                    InstanceState::Stopped,
                )
                .await?;
            }
        }
        if rec.connector.state != InstanceState::Stopped {
            stop_unit(
                cluster,
                &rec,
                None,
                &rec.connector,
                live,
                InstanceState::Stopped,
            )
            .await?;
        }
        return Ok(());
    }

    // The connector instance.
    let conn = &rec.connector;
    let to = want(None);
    let conn_needs_start = !is_live(conn, live)
        || conn.restart
        || rec.config_changed
        || matches!(
            conn.state,
            InstanceState::Stopped | InstanceState::Unassigned | InstanceState::Restarting
        )
        || to != conn.executor;
    let conn_failed_stays = conn.state == InstanceState::Failed
        && !conn.restart
        && !rec.config_changed
        && is_live(conn, live);
    if conn_needs_start && !conn_failed_stays {
        if is_live(conn, live) && may_hold_instance(conn.state) {
            call_stop(cluster, &rec, None, conn, live, false).await;
        }
        start_unit(cluster, name, None, to, live).await?;
        return Ok(()); // the next pass recomputes task configs from the new instance
    }

    // Task configs.
    let Some(rec) = cluster.store.connector_shared(name)? else {
        return Ok(());
    };
    if rec.deleting {
        return Ok(());
    }
    if rec.task_configs_stale && rec.connector.state == InstanceState::Running {
        compute_task_configs(cluster, &rec, live).await?;
    }
    let Some(rec) = cluster.store.connector_shared(name)? else {
        return Ok(());
    };
    if rec.deleting || rec.task_configs_stale {
        return Ok(());
    }

    let mut starts: Vec<(usize, Option<String>)> = Vec::new();
    for (i, t) in rec.tasks.iter().enumerate() {
        let task = Some(i as u32);
        let to = want(task);
        let step = match rec.target {
            TargetState::Paused => {
                match (t.state.has_live_instance() && is_live(t, live), &t.executor) {
                    (true, Some(e)) => Step::Pause {
                        executor: e.clone(),
                        generation: t.generation,
                    },
                    _ if t.state != InstanceState::Paused || t.executor != to => {
                        // Nothing runs; record it paused where it would run.
                        Step::Pause {
                            executor: to.clone().unwrap_or_default(),
                            generation: t.generation,
                        }
                    }
                    _ => Step::Nothing,
                }
            }
            TargetState::Started | TargetState::Stopped => {
                let failed_stays = t.state == InstanceState::Failed
                    && !t.restart
                    && is_live(t, live)
                    && to == t.executor;
                let needs = !is_live(t, live)
                    || t.restart
                    || to != t.executor
                    || matches!(
                        t.state,
                        InstanceState::Paused
                            | InstanceState::Unassigned
                            | InstanceState::Stopped
                            | InstanceState::Restarting
                    );
                if needs && !failed_stays {
                    Step::Start { to }
                } else {
                    Step::Nothing
                }
            }
        };
        match step {
            Step::Nothing => {}
            Step::Pause {
                executor,
                generation,
            } => {
                if t.state.has_live_instance() && is_live(t, live) {
                    call_stop(cluster, &rec, task, t, live, false).await;
                }
                cluster
                    .modify_connector_batched(name, |r| {
                        if r.deleting {
                            return None;
                        }
                        let cur = r.tasks.get_mut(i)?;
                        if cur.generation != generation {
                            return None;
                        }
                        cur.state = cur.state.on(InstanceEvent::Paused);
                        cur.executor = (!executor.is_empty()).then(|| executor.clone());
                        cur.epoch = cur
                            .executor
                            .as_ref()
                            .and_then(|e| live.get(e))
                            .map_or(0, |e| e.epoch);
                        cur.restart = false;
                        Some(())
                    })
                    .await?;
            }
            Step::Start { to } => {
                if may_hold_instance(t.state) && is_live(t, live) {
                    call_stop(cluster, &rec, task, t, live, false).await;
                }
                starts.push((i, to));
            }
        }
    }
    // Every task to start was stopped above (if something ran); now they start together.
    start_tasks(cluster, name, &starts, live).await
}

/// Stops one unit with `false` (if something runs) and records it as `then`, unassigned.
async fn stop_unit(
    cluster: &Cluster,
    rec: &ConnectorRecord,
    task: Option<u32>,
    inst: &Instance,
    live: &BTreeMap<String, ExecutorRecord>,
    then: InstanceState,
) -> Result<(), HerderError> {
    if inst.state.has_live_instance() && is_live(inst, live) {
        call_stop(cluster, rec, task, inst, live, false).await;
    }
    let generation = inst.generation;
    cluster
        .modify_connector_batched(&rec.name, |r| {
            if r.deleting {
                return None;
            }
            let cur = match task {
                Some(i) => r.tasks.get_mut(i as usize)?,
                None => &mut r.connector,
            };
            if cur.generation != generation {
                return None;
            }
            cur.state = match then {
                InstanceState::Paused => cur.state.on(InstanceEvent::Paused),
                _ => cur.state.on(InstanceEvent::Stopped),
            };
            cur.executor = None;
            cur.epoch = 0;
            cur.restart = false;
            Some(())
        })
        .await?;
    Ok(())
}

/// Sends a stop with `false`. Failures are logged: a stop(false) that did not land leaves
/// an instance that its executor fences on the next generation or epoch.
async fn call_stop(
    cluster: &Cluster,
    rec: &ConnectorRecord,
    task: Option<u32>,
    inst: &Instance,
    live: &BTreeMap<String, ExecutorRecord>,
    connector_deleted: bool,
) {
    let Some(exec) = inst.executor.as_ref().and_then(|e| live.get(e)) else {
        return;
    };
    let result = match task {
        Some(t) => cluster
            .clients
            .stop_task(
                &exec.address,
                pb::StopTaskRequest {
                    task: Some(pb::TaskId {
                        connector: rec.name.clone(),
                        task: t,
                    }),
                    connector_deleted,
                    generation: inst.generation,
                    timeout_ms: 0,
                },
            )
            .await
            .map(|r| (r.outcome, r.error)),
        None => cluster
            .clients
            .stop_connector(
                &exec.address,
                pb::ExecutorStopConnectorRequest {
                    connector: rec.name.clone(),
                    connector_deleted,
                    generation: inst.generation,
                    timeout_ms: 0,
                },
            )
            .await
            .map(|r| (r.outcome, r.error)),
    };
    match result {
        Ok((outcome, error)) => {
            info!(connector = %rec.name, task = ?task, generation = inst.generation,
            executor = %exec.id, connector_deleted, outcome, error = %error, "stopped")
        }
        Err(e) => warn!(connector = %rec.name, task = ?task, generation = inst.generation,
            executor = %exec.id, error = %e, "stop failed"),
    }
}

/// Records the intent (host, epoch, new generation, RESTARTING), sends the start, records
/// the result. `to == None` records the unit unassigned.
async fn start_unit(
    cluster: &Cluster,
    name: &str,
    task: Option<u32>,
    to: Option<String>,
    live: &BTreeMap<String, ExecutorRecord>,
) -> Result<(), HerderError> {
    let exec = to.as_ref().and_then(|id| live.get(id)).cloned();
    let intent = cluster
        .modify_connector_batched(name, |r| {
            if r.deleting {
                return None;
            }
            if exec.is_none() {
                // Nowhere to run: record it unassigned once, not on every pass.
                let cur = match task {
                    Some(i) => r.tasks.get(i as usize)?,
                    None => &r.connector,
                };
                if cur.executor.is_none() && cur.state == InstanceState::Unassigned && !cur.restart
                {
                    return None;
                }
            }
            let generation = r.take_generation();
            let target = r.target;
            let config = r.config.clone();
            let incarnation = r.incarnation.clone();
            let task_config = match task {
                Some(i) => Some(r.task_configs.get(i as usize)?.clone()),
                None => None,
            };
            let cur = match task {
                Some(i) => r.tasks.get_mut(i as usize)?,
                None => &mut r.connector,
            };
            cur.generation = generation;
            cur.restart = false;
            match &exec {
                Some(e) => {
                    cur.executor = Some(e.id.clone());
                    cur.epoch = e.epoch;
                    cur.state = InstanceState::Restarting;
                    cur.error.clear();
                }
                None => {
                    cur.executor = None;
                    cur.epoch = 0;
                    cur.state = cur.state.on(InstanceEvent::Unassigned);
                }
            }
            if task.is_none() {
                r.config_changed = false;
            }
            Some((generation, target, config, incarnation, task_config))
        })
        .await?;
    let (Some((generation, target, config, incarnation, task_config)), Some(exec)) = (intent, exec)
    else {
        return Ok(());
    };
    let target_state = match target {
        TargetState::Paused => pb::TargetState::Paused,
        TargetState::Started | TargetState::Stopped => pb::TargetState::Started,
    } as i32;
    let result = match task {
        None => cluster
            .clients
            .start_connector(
                &exec.address,
                pb::StartConnectorRequest {
                    connector: name.to_owned(),
                    config: config.into_iter().collect(),
                    generation,
                    target_state,
                    cleanup_only: false,
                    incarnation,
                    executor_epoch: exec.epoch,
                },
            )
            .await
            .map(|r| (r.state, r.error)),
        Some(t) => {
            let offsets = cluster
                .store
                .offsets(name)?
                .into_iter()
                .map(|(partition, offset)| pb::SourceOffset { partition, offset })
                .collect();
            cluster
                .clients
                .start_task(
                    &exec.address,
                    pb::StartTaskRequest {
                        task: Some(pb::TaskId {
                            connector: name.to_owned(),
                            task: t,
                        }),
                        connector_config: config.into_iter().collect(),
                        task_config: task_config.unwrap_or_default().into_iter().collect(),
                        generation,
                        target_state,
                        cleanup_only: false,
                        offsets,
                        incarnation,
                        executor_epoch: exec.epoch,
                    },
                )
                .await
                .map(|r| (r.state, r.error))
        }
    };
    let (event, error) = match result {
        Ok((state, error)) if state == pb::State::Failed as i32 => (InstanceEvent::Failed, error),
        Ok(_) => (InstanceEvent::Started, String::new()),
        Err(e @ CallError::Unreachable { .. })
        | Err(
            e @ CallError::Refused {
                code: tonic::Code::FailedPrecondition | tonic::Code::NotFound,
                ..
            },
        ) => {
            // Unknown outcome, or the executor is between epochs (it registered but has
            // not taken its new epoch yet): stay RESTARTING; the next pass starts it again
            // with a new generation, or the executor's lease decides.
            warn!(connector = %name, task = ?task, generation, executor = %exec.id, error = %e, "start not taken; retrying");
            return Ok(());
        }
        Err(e) => (InstanceEvent::Failed, e.to_string()),
    };
    info!(connector = %name, task = ?task, generation, executor = %exec.id, ?event, "started");
    cluster
        .modify_connector_batched(name, |r| {
            if r.deleting {
                return None;
            }
            let stale = task.is_none() && event == InstanceEvent::Started;
            let already_stale = r.task_configs_stale;
            let cur = match task {
                Some(i) => r.tasks.get_mut(i as usize)?,
                None => &mut r.connector,
            };
            if cur.generation != generation {
                return None;
            }
            // The executor's status report may have recorded this already: no empty write.
            if cur.state.on(event) == cur.state && cur.error == error && (!stale || already_stale) {
                return None;
            }
            cur.state = cur.state.on(event);
            cur.error = error.clone();
            if stale {
                r.task_configs_stale = true;
            }
            Some(())
        })
        .await?;
    Ok(())
}

/// A task start recorded by [`start_tasks`], to be sent.
struct TaskStart {
    task: usize,
    generation: u64,
    exec: ExecutorRecord,
    task_config: wharf::sdk::ConfigMap,
}

/// [`start_unit`] for several tasks of one connector at once: one write records every
/// intent (host, epoch, new generation, RESTARTING; or unassigned), the starts go out
/// together, one write records every result. `starts`: task index and where it goes.
async fn start_tasks(
    cluster: &Cluster,
    name: &str,
    starts: &[(usize, Option<String>)],
    live: &BTreeMap<String, ExecutorRecord>,
) -> Result<(), HerderError> {
    if starts.is_empty() {
        return Ok(());
    }
    let intent = cluster
        .modify_connector_batched(name, |r| {
            if r.deleting {
                return None;
            }
            let mut sends = Vec::new();
            let mut wrote = false;
            for (i, to) in starts {
                let exec = to.as_ref().and_then(|id| live.get(id));
                let Some(task_config) = r.task_configs.get(*i).cloned() else {
                    continue;
                };
                let Some(cur) = r.tasks.get(*i) else {
                    continue;
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
                let Some(cur) = r.tasks.get_mut(*i) else {
                    continue;
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
                        sends.push(TaskStart {
                            task: *i,
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
            }
            wrote.then(|| (sends, r.target, r.config.clone(), r.incarnation.clone()))
        })
        .await?;
    let Some((sends, target, config, incarnation)) = intent else {
        return Ok(());
    };
    if sends.is_empty() {
        return Ok(());
    }
    let target_state = match target {
        TargetState::Paused => pb::TargetState::Paused,
        TargetState::Started | TargetState::Stopped => pb::TargetState::Started,
    } as i32;
    let offsets: Vec<pb::SourceOffset> = cluster
        .store
        .offsets(name)?
        .into_iter()
        .map(|(partition, offset)| pb::SourceOffset { partition, offset })
        .collect();
    let calls = sends.iter().map(|s| {
        let req = pb::StartTaskRequest {
            task: Some(pb::TaskId {
                connector: name.to_owned(),
                task: s.task as u32,
            }),
            connector_config: config.clone().into_iter().collect(),
            task_config: s.task_config.clone().into_iter().collect(),
            generation: s.generation,
            target_state,
            cleanup_only: false,
            offsets: offsets.clone(),
            incarnation: incarnation.clone(),
            executor_epoch: s.exec.epoch,
        };
        async move {
            // Never closed; without a permit the start goes out anyway.
            let _permit = cluster.task_starts.acquire().await.ok();
            let result = cluster
                .clients
                .start_task(&s.exec.address, req)
                .await
                .map(|r| (r.state, r.error));
            let outcome = match result {
                Ok((state, error)) if state == pb::State::Failed as i32 => {
                    Some((InstanceEvent::Failed, error))
                }
                Ok(_) => Some((InstanceEvent::Started, String::new())),
                Err(e @ CallError::Unreachable { .. })
                | Err(
                    e @ CallError::Refused {
                        code: tonic::Code::FailedPrecondition | tonic::Code::NotFound,
                        ..
                    },
                ) => {
                    // As in start_unit: unknown outcome, stay RESTARTING; the next pass
                    // starts it again with a new generation, or the lease decides.
                    warn!(connector = %name, task = s.task, generation = s.generation, executor = %s.exec.id, error = %e, "start not taken; retrying");
                    None
                }
                Err(e) => Some((InstanceEvent::Failed, e.to_string())),
            };
            if let Some((event, _)) = &outcome {
                info!(connector = %name, task = s.task, generation = s.generation, executor = %s.exec.id, ?event, "started");
            }
            (s.task, s.generation, outcome)
        }
    });
    let results: Vec<(usize, u64, InstanceEvent, String)> = futures::future::join_all(calls)
        .await
        .into_iter()
        .filter_map(|(task, generation, outcome)| {
            outcome.map(|(event, error)| (task, generation, event, error))
        })
        .collect();
    if results.is_empty() {
        return Ok(());
    }
    cluster
        .modify_connector_batched(name, |r| {
            if r.deleting {
                return None;
            }
            let mut wrote = false;
            for (task, generation, event, error) in &results {
                let Some(cur) = r.tasks.get_mut(*task) else {
                    continue;
                };
                if cur.generation != *generation {
                    continue;
                }
                // The executor's status report may have recorded this already.
                if cur.state.on(*event) == cur.state && cur.error == *error {
                    continue;
                }
                cur.state = cur.state.on(*event);
                cur.error = error.clone();
                wrote = true;
            }
            wrote.then_some(())
        })
        .await?;
    Ok(())
}

/// Asks the connector instance for task configs and applies them: surplus tasks are
/// stopped with `false` and forgotten first, then changed tasks are marked for restart.
async fn compute_task_configs(
    cluster: &Cluster,
    rec: &ConnectorRecord,
    live: &BTreeMap<String, ExecutorRecord>,
) -> Result<(), HerderError> {
    let Some(exec) = rec.connector.executor.as_ref().and_then(|e| live.get(e)) else {
        return Ok(());
    };
    let generation = rec.connector.generation;
    let resp = match cluster
        .clients
        .compute_task_configs(
            &exec.address,
            pb::ComputeTaskConfigsRequest {
                connector: rec.name.clone(),
                max_tasks: rec.tasks_max,
                generation,
            },
        )
        .await
    {
        Ok(r) => r,
        Err(e) => {
            warn!(connector = %rec.name, generation, executor = %exec.id, error = %e, "task configs failed");
            return Ok(());
        }
    };
    let mut configs: Vec<wharf::sdk::ConfigMap> = resp
        .task_configs
        .into_iter()
        .map(|t| t.config.into_iter().collect())
        .collect();
    configs.truncate(rec.tasks_max as usize);
    // Surplus tasks stop (false) before anything new starts, so that no more than
    // tasks.max tasks ever run.
    for i in configs.len()..rec.tasks.len() {
        let t = &rec.tasks[i];
        if t.state.has_live_instance() && is_live(t, live) {
            call_stop(cluster, rec, Some(i as u32), t, live, false).await;
        }
    }
    cluster
        .modify_connector_batched(&rec.name, |r| {
            if r.deleting || r.connector.generation != generation {
                return None;
            }
            r.tasks.truncate(configs.len());
            r.task_configs.truncate(configs.len());
            for (i, c) in configs.iter().enumerate() {
                match r.task_configs.get(i) {
                    Some(old) if old == c => {}
                    Some(_) => {
                        r.task_configs[i] = c.clone();
                        if let Some(t) = r.tasks.get_mut(i) {
                            t.restart = true;
                        }
                    }
                    None => {
                        r.task_configs.push(c.clone());
                        r.tasks.push(Instance::unassigned());
                    }
                }
            }
            r.task_configs_stale = false;
            Some(())
        })
        .await?;
    Ok(())
}
