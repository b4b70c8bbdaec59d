//! The herder loop: turns target states and executors into placements and lifecycle
//! actions, and carries them out. Deletions are the finalizer's ([`super::finalizer`]);
//! the herder never touches a connector marked deleting.
//!
//! Each pass takes facts (the connectors, an [`ExecutorView`] of every executor's health),
//! computes placements ([`crate::plan::plan_with`]: over every connector on a full pass;
//! otherwise over the connectors that changed, beside the load the others put on each
//! executor, so that a pass costs what changed) and hands every connector that needs work
//! to its own task; the loop never waits for those tasks, so a
//! call to a frozen or slow executor delays only the connector that made it, and lease
//! expiry is noticed on time. A connector whose task still runs is
//! looked at again on the next pass after it ended. Inside a task, each unit's action
//! comes from the pure table [`crate::plan::unit::decide`].
//!
//! A pass covers the connectors that changed since the last one (marked by
//! [`Cluster::changed`]); every connector when the set of live executors changed, when
//! the loop woke on its timer (nothing happened for [`RECONCILE_INTERVAL_MS`]), on
//! [`Cluster::wake`], and at least every [`FULL_PASS_INTERVAL_MS`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::client::{CallError, StopCall};
use super::cluster::{
    CallKind, Cluster, Dirty, ExecutorView, FULL_PASS_INTERVAL_MS, HerderError,
    RECONCILE_INTERVAL_MS,
};
use super::load::{LoadIndex, per_executor};
use super::start::start_units;
use crate::model::{ConnectorRecord, Instance, InstanceEvent, InstanceState, TargetState};
use crate::plan::partitions::shares_moved;
use crate::plan::unit::{Action, Host, Hosted, Want, decide};
use crate::plan::{self, LiveExecutor, Unit, UnitKey};

/// What the herder remembers between passes.
#[derive(Debug, Default)]
struct HerderMemory {
    /// Live executors (id, epoch) of the last pass.
    live: Vec<(String, u64)>,
    /// When the last pass over every connector began.
    last_full: Option<Instant>,
    /// How long the last pass over every connector took.
    last_full_cost: Duration,
    /// Units per executor of every connector, as the last pass that covered it placed them.
    load: LoadIndex,
}

/// Longest pause after a pass before the next one, in milliseconds. The herder pauses
/// as long as its last pass took (at most this), so that its loop takes at most about
/// half a core during a burst of changes and a quiet cluster waits for nothing.
const MAX_PASS_PAUSE_MS: u64 = 50;

/// How many times its own duration a full pass waits at least before the next one that
/// only the clock asks for: full passes take at most about 1/10 of a core, however large
/// the cluster (at 10,000 connectors x 10 tasks one takes a good part of a second).
const FULL_PASS_COST_FACTOR: u32 = 10;

/// Whether this pass covers every connector. A pass must when a connector may have been
/// missed (`all_dirty`: a failed pass, an explicit wake) or the live executors changed
/// (placements move). The clock asks for one after `interval` (the idle timer: nothing
/// happened for [`RECONCILE_INTERVAL_MS`]; otherwise [`FULL_PASS_INTERVAL_MS`], for retries
/// of steps that changed nothing), but never sooner than [`FULL_PASS_COST_FACTOR`] times
/// what the last full pass cost.
fn covers_everything(
    all_dirty: bool,
    live_changed: bool,
    timer: bool,
    since_last_full: Option<Duration>,
    last_full_cost: Duration,
) -> bool {
    let interval = Duration::from_millis(if timer {
        RECONCILE_INTERVAL_MS
    } else {
        FULL_PASS_INTERVAL_MS
    })
    .max(last_full_cost * FULL_PASS_COST_FACTOR);
    match (all_dirty, live_changed, since_last_full) {
        (true, _, _) | (_, true, _) | (false, false, None) => true,
        (false, false, Some(since)) => since >= interval,
    }
}

/// Connectors whose reconcile task runs, shared with those tasks.
#[derive(Debug, Default)]
struct Reconciling {
    /// Connectors whose reconcile task runs.
    running: HashSet<String>,
    /// Of those, the ones that changed meanwhile: marked for the herder again when their
    /// task ends, not planned on every pass while it runs (during a mass create most
    /// connectors wait for task starts, and each pass would rebuild all their units).
    again: HashSet<String>,
}

type InFlight = Arc<Mutex<Reconciling>>;

fn lock(set: &InFlight) -> std::sync::MutexGuard<'_, Reconciling> {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the herder still waits for before it has caught up with the cluster since it
/// started (the process started, or it won a leadership term): until then the status it
/// serves is what the store recorded, not yet what the executors confirmed (the "herder
/// caught up" log line and metric after a control-plane restart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatchUp {
    /// No pass over every connector has run yet.
    FirstPass,
    /// Some connector is marked for the next pass (a move planned over two passes, a
    /// change that came meanwhile).
    Marked,
    /// Connectors whose reconcile (starts, stops) still runs: how many.
    Reconciling(usize),
    /// Live executors whose heartbeat has not yet listed every instance recorded
    /// RUNNING on them: their ids.
    Unconfirmed(Vec<String>),
    /// Every connector decided, nothing in flight, every live executor confirmed.
    Done,
}

/// Where the herder stands in its catch-up: `full_pass_done` once a pass covered every
/// connector, `marked` while some connector waits for the next pass, `reconciling`
/// connectors still being worked on, `live` executors (id, epoch) and whether each one's
/// heartbeat confirmed its records since the start.
pub fn catch_up(
    full_pass_done: bool,
    marked: bool,
    reconciling: usize,
    live: &[(String, u64)],
    confirmed: impl Fn(&str, u64) -> bool,
) -> CatchUp {
    let unconfirmed: Vec<String> = live
        .iter()
        .filter(|(id, epoch)| !confirmed(id, *epoch))
        .map(|(id, _)| id.clone())
        .collect();
    match (full_pass_done, marked, reconciling, unconfirmed.is_empty()) {
        (false, _, _, _) => CatchUp::FirstPass,
        (true, true, _, _) => CatchUp::Marked,
        (true, false, n @ 1.., _) => CatchUp::Reconciling(n),
        (true, false, 0, false) => CatchUp::Unconfirmed(unconfirmed),
        (true, false, 0, true) => CatchUp::Done,
    }
}

/// Runs the herder until `cancel` fires. Errors are logged and retried on the next pass;
/// they never end the loop.
pub async fn run_herder(cluster: Arc<Cluster>, cancel: CancellationToken) {
    let mut memory = HerderMemory::default();
    let in_flight: InFlight = Arc::default();
    let mut timer = true;
    let began = Instant::now();
    let mut caught_up = false;
    loop {
        // Judged before the pass: the reconciles the last pass spawned had the pause
        // to end in.
        if !caught_up {
            let reconciling = lock(&in_flight).running.len();
            let state = catch_up(
                memory.last_full.is_some(),
                cluster.has_dirty(),
                reconciling,
                &memory.live,
                |id, epoch| cluster.executors.hosted_confirmed(id, epoch, began),
            );
            if state == CatchUp::Done {
                caught_up = true;
                let took = began.elapsed();
                crate::observe::herder_caught_up(took);
                info!(
                    elapsed_ms = took.as_millis() as u64,
                    executors = memory.live.len(),
                    "herder caught up: every connector decided, every live executor confirmed what it hosts"
                );
            }
        }
        let started = std::time::Instant::now();
        if let Err(e) = herder_pass(&cluster, &mut memory, &in_flight, timer) {
            warn!(error = %e, "herder pass failed; retrying");
            cluster.mark_all_dirty();
        }
        crate::observe::pass(crate::observe::HERDER_PASS_SECONDS, started);
        // Changes that come meanwhile gather for the next pass (the wake is kept), so that
        // during a burst a connector is planned once per pass, not once per change.
        let pause = started
            .elapsed()
            .min(Duration::from_millis(MAX_PASS_PAUSE_MS));
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
        timer = tokio::select! {
            () = cancel.cancelled() => return,
            () = cluster.herder_wake.notified() => false,
            () = tokio::time::sleep(Duration::from_millis(RECONCILE_INTERVAL_MS)) => true,
        };
    }
}

/// The recorded instance as the herder's decision reads it. The herder awaits its own
/// calls before it decides about the same connector again, so a recorded RESTARTING is a
/// start whose answer was lost: its outcome is unknown and a new start (new generation)
/// fences whatever it left, so it reads as absent.
/// On a host that is not live, the start may still be running there: it reads as
/// starting (wait for the lease, or start elsewhere once the host is lost).
fn hosted_for_herder(state: InstanceState, host: Host) -> Hosted {
    match state {
        InstanceState::Restarting if host == Host::Live => Hosted::Absent,
        InstanceState::Restarting => Hosted::Starting,
        s @ (InstanceState::Unassigned
        | InstanceState::Running
        | InstanceState::Paused
        | InstanceState::Stopped
        | InstanceState::Failed) => Hosted::from_recorded(s),
    }
}

/// True when the executor may still hold an instance in this state: a running one, a
/// failed one (kept until stopped), or one whose start was sent.
fn may_hold_instance(state: InstanceState) -> bool {
    state.has_live_instance() || state == InstanceState::Failed
}

fn host_of(inst: &Instance, view: &ExecutorView) -> Host {
    view.host(inst.executor.as_deref(), inst.epoch)
}

/// One pass; `timer`: the loop woke because nothing happened for a while. Never awaits
/// an executor call.
fn herder_pass(
    cluster: &Arc<Cluster>,
    memory: &mut HerderMemory,
    in_flight: &InFlight,
    timer: bool,
) -> Result<(), HerderError> {
    let dirty = take_marked(cluster, in_flight);
    cluster.expire_leases()?;
    let view = cluster.executor_view()?;
    spawn_probes(cluster, &view);
    let live_now: Vec<(String, u64)> = view
        .all
        .values()
        .filter(|e| view.health.get(&e.id) == Some(&Host::Live))
        .map(|e| (e.id.clone(), e.epoch))
        .collect();
    let full = covers_everything(
        dirty.all,
        live_now != memory.live,
        timer,
        memory.last_full.map(|t| t.elapsed()),
        memory.last_full_cost,
    );
    memory.live = live_now;
    let began = Instant::now();
    // A full pass reads every connector; another only the ones that changed, so that a
    // pass costs what changed, not the cluster.
    let connectors: Vec<Arc<ConnectorRecord>> = if full {
        cluster.store.connectors_shared()?
    } else {
        cluster.store.connectors_named(&dirty.names)?
    }
    .into_iter()
    .filter(|c| !c.deleting)
    .collect();
    let units = units_of(&connectors, &view);
    let desired = plan_units(&units, &view, full, &memory.load, &dirty.names);
    update_load(&mut memory.load, full, &dirty.names, &desired);
    spawn_reconciles(cluster, &connectors, desired, Arc::new(view), in_flight);
    tracing::debug!(
        full,
        connectors = connectors.len(),
        units = units.len(),
        elapsed_us = began.elapsed().as_micros() as u64,
        "herder pass"
    );
    if full {
        memory.last_full = Some(began);
        memory.last_full_cost = began.elapsed();
    }
    Ok(())
}

/// Takes the connectors marked for this pass. Taken first: a change after this point
/// marks its connector for the next pass. A connector still being reconciled is planned
/// once its task ended (it is marked again then), not on this pass.
fn take_marked(cluster: &Cluster, in_flight: &InFlight) -> Dirty {
    let mut dirty = cluster.take_dirty();
    let mut reconciling = lock(in_flight);
    let Reconciling { running, again } = &mut *reconciling;
    dirty.names.retain(|name| {
        let deferred = running.contains(name);
        if deferred {
            again.insert(name.clone());
        }
        !deferred
    });
    dirty
}

/// Probes the live executors not yet found at their advertised address, each in its own
/// task; they take new work once that succeeded.
fn spawn_probes(cluster: &Arc<Cluster>, view: &ExecutorView) {
    for e in view.all.values() {
        if view.health.get(&e.id) == Some(&Host::Live) && cluster.executors.probe_due(e) {
            let (cluster, exec) = (cluster.clone(), e.clone());
            wharf::task::spawn(
                wharf::task::TaskKind::Detached,
                "executor probe",
                async move {
                    cluster.verify(&exec, false).await;
                    cluster.executors.probe_done(&exec.id);
                },
            );
        }
    }
}

/// The units of `connectors` that should run (none of a STOPPED connector), each with the
/// executor it stays on: a unit stays on an executor that holds its lease (even a silent
/// one: its lease decides).
fn units_of(connectors: &[Arc<ConnectorRecord>], view: &ExecutorView) -> Vec<Unit> {
    let current = |i: &Instance| match host_of(i, view) {
        Host::Live | Host::Unresponsive => i.executor.clone(),
        Host::Lost => None,
    };
    let mut units = Vec::new();
    for c in connectors {
        if c.target == TargetState::Stopped {
            continue;
        }
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
    units
}

/// Where each unit should run, by connector. One plan over every connector on a `full`
/// pass, so that load evens out; on another pass only the units that need a host are
/// planned, beside the load the others put on each executor (`load`, kept between passes,
/// without the connectors `planned` now). New work goes only to live, reachable executors.
fn plan_units(
    units: &[Unit],
    view: &ExecutorView,
    full: bool,
    load: &LoadIndex,
    planned: &HashSet<String>,
) -> HashMap<String, BTreeMap<Option<u32>, Option<String>>> {
    let plan_execs: Vec<LiveExecutor> = view
        .all
        .values()
        .filter(|e| view.health.get(&e.id) != Some(&Host::Lost))
        .map(|e| LiveExecutor {
            id: e.id.clone(),
            plugins: e.plugins.iter().map(|p| p.name.clone()).collect(),
            accepts_new: view.placeable.contains(&e.id),
        })
        .collect();
    let mut desired: HashMap<UnitKey, Option<String>> = units
        .iter()
        .map(|u| (u.key.clone(), u.current.clone()))
        .collect();
    let moves = if full {
        plan::plan_assignments(units, &plan_execs)
    } else if units.iter().any(|u| needs_host(u, &plan_execs)) {
        // With evening off the others stay where they are anyway, and they count in the
        // load of the executors that hold them. During a mass create most units of a
        // changed connector already run.
        let (needy, placed): (Vec<Unit>, Vec<Unit>) = units
            .iter()
            .cloned()
            .partition(|u| needs_host(u, &plan_execs));
        let mut base = load.without(planned);
        for u in &placed {
            if let Some(e) = plan_execs
                .iter()
                .find(|e| Some(&e.id) == u.current.as_ref())
            {
                *base.entry(e.id.as_str()).or_default() += 1;
            }
        }
        plan::plan_with(&needy, &plan_execs, &base, plan::Evening::Off)
    } else {
        // Every unit keeps its host, and nothing evens out on this pass.
        Vec::new()
    };
    for m in moves {
        desired.insert(m.key, m.to);
    }
    by_connector(desired)
}

/// The load index follows the plan: rebuilt on a full pass, the `planned` connectors'
/// entries replaced on another (a stopped, deleting or deleted one puts nothing).
fn update_load(
    load: &mut LoadIndex,
    full: bool,
    planned: &HashSet<String>,
    desired: &HashMap<String, BTreeMap<Option<u32>, Option<String>>>,
) {
    if full {
        *load = LoadIndex::default();
    }
    let mut ids: HashMap<String, Arc<str>> = load
        .total
        .keys()
        .map(|e| (e.to_string(), e.clone()))
        .collect();
    if !full {
        for name in planned {
            load.remove(name);
        }
    }
    for (name, placed) in desired {
        let per = per_executor(placed, &mut ids);
        load.set(name, per);
    }
}

/// Hands every connector of the pass to a reconcile task of its own, not awaited (the
/// in-flight set says when it ended); a connector whose task still runs is marked to be
/// planned again once it ended.
fn spawn_reconciles(
    cluster: &Arc<Cluster>,
    connectors: &[Arc<ConnectorRecord>],
    mut desired: HashMap<String, BTreeMap<Option<u32>, Option<String>>>,
    view: Arc<ExecutorView>,
    in_flight: &InFlight,
) {
    for c in connectors {
        {
            let mut reconciling = lock(in_flight);
            if !reconciling.running.insert(c.name.clone()) {
                // Still working on it (maybe waiting for a slow executor): again once
                // that ended.
                reconciling.again.insert(c.name.clone());
                continue;
            }
        }
        let wanted = desired.remove(&c.name).unwrap_or_default();
        let (cluster, view, in_flight, name) = (
            cluster.clone(),
            view.clone(),
            in_flight.clone(),
            c.name.clone(),
        );
        wharf::task::spawn(
            wharf::task::TaskKind::Detached,
            "reconcile connector",
            async move {
                let result = reconcile_connector(&cluster, &name, &view, &wanted).await;
                let changed_meanwhile = {
                    let mut reconciling = lock(&in_flight);
                    reconciling.running.remove(&name);
                    reconciling.again.remove(&name)
                };
                if changed_meanwhile {
                    cluster.mark_dirty(&name);
                    cluster.herder_wake.notify_one();
                }
                match result {
                    Ok(Pass::Done) => {}
                    Ok(Pass::Again) => {
                        cluster.mark_dirty(&name);
                    }
                    Err(e) => {
                        warn!(connector = %name, error = %e, "reconcile failed; retrying");
                        cluster.mark_dirty(&name);
                    }
                }
            },
        );
    }
}

/// Where each unit should run, grouped by connector: one walk over the plan, so that a
/// pass costs O(units) rather than O(units) for every connector it reconciles.
fn by_connector(
    desired: HashMap<UnitKey, Option<String>>,
) -> HashMap<String, BTreeMap<Option<u32>, Option<String>>> {
    let mut out: HashMap<String, BTreeMap<Option<u32>, Option<String>>> = HashMap::new();
    for (k, to) in desired {
        out.entry(k.connector).or_default().insert(k.task, to);
    }
    out
}

/// True when `u` cannot stay where it is: no host, or one that is lost or does not offer
/// its plugin (the plan's step 1 would not keep it).
fn needs_host(u: &Unit, executors: &[LiveExecutor]) -> bool {
    u.current.as_deref().is_none_or(|c| {
        !executors
            .iter()
            .any(|e| e.id == c && e.plugins.contains(&u.plugin))
    })
}

/// Whether a connector needs another look soon.
enum Pass {
    /// Nothing left to do until something changes.
    Done,
    /// Something waits (a silent host, a backoff): look again on the next pass.
    Again,
}

#[tracing::instrument(skip(cluster, view, wanted), level = "debug")]
async fn reconcile_connector(
    cluster: &Cluster,
    name: &str,
    view: &ExecutorView,
    wanted: &BTreeMap<Option<u32>, Option<String>>,
) -> Result<Pass, HerderError> {
    let Some(rec) = cluster.store.connector_shared(name)? else {
        return Ok(Pass::Done);
    };
    if rec.deleting {
        return Ok(Pass::Done);
    }
    let want = |task: Option<u32>| wanted.get(&task).cloned().flatten();
    let mut again = false;

    if rec.target == TargetState::Stopped {
        // STOPPED means no instance of the connector or its tasks remains anywhere:
        // tasks first, then the connector instance, each stopped itself whatever its state.
        for (i, t) in rec.tasks.iter().enumerate() {
            if t.state != InstanceState::Stopped || t.executor.is_some() {
                again |=
                    !settle(cluster, &rec, Some(i as u32), t, view, Want::Stopped, None).await?;
            }
        }
        if rec.connector.state != InstanceState::Stopped || rec.connector.executor.is_some() {
            again |= !settle(
                cluster,
                &rec,
                None,
                &rec.connector,
                view,
                Want::Stopped,
                None,
            )
            .await?;
        }
        return Ok(if again { Pass::Again } else { Pass::Done });
    }

    // The connector instance runs for STARTED and PAUSED.
    let conn = &rec.connector;
    let to = want(None);
    // A failed connector instance waits for a restart or a new config, even if moved.
    let moved = to != conn.executor && conn.state != InstanceState::Failed;
    let replace = conn.restart || rec.config_changed || moved;
    match start_or_keep(cluster, conn, view, to.as_deref(), replace) {
        Next::Keep => {}
        Next::Wait => return Ok(Pass::Again),
        Next::Start { stop_first } => {
            if stop_first {
                stop_false(cluster, &rec, None, conn, view).await;
            }
            let mut units = vec![(None, to.clone())];
            if to.is_none() {
                // Nowhere to run the connector instance, so nowhere to run its tasks
                // (same plugin): a task still recorded on a lost host is recorded
                // unassigned now, not once the connector instance runs again (the
                // status must not say RUNNING for a task no executor hosts).
                units.extend(tasks_with_nowhere_to_run(cluster, &rec, view));
            }
            start_units(cluster, name, &units, view).await?;
            return Ok(Pass::Done); // the next pass computes task configs from the new instance
        }
    }

    // Task configs.
    let Some(rec) = cluster.store.connector_shared(name)? else {
        return Ok(Pass::Done);
    };
    if rec.deleting {
        return Ok(Pass::Done);
    }
    // As Kafka Connect (KIP-980): a paused connector's task configs are computed when it
    // resumes, so one created PAUSED has no tasks until then; tasks it already has are
    // paused below.
    let compute_now = rec.target != TargetState::Paused;
    if rec.task_configs_stale && compute_now && rec.connector.state == InstanceState::Running {
        compute_task_configs(cluster, &rec, view).await?;
    }
    let Some(rec) = cluster.store.connector_shared(name)? else {
        return Ok(Pass::Done);
    };
    if rec.deleting || (rec.task_configs_stale && rec.target != TargetState::Paused) {
        return Ok(Pass::Done);
    }

    let mut starts: Vec<(Option<usize>, Option<String>)> = Vec::new();
    for (i, t) in rec.tasks.iter().enumerate() {
        let task = Some(i as u32);
        let to = want(task);
        match rec.target {
            TargetState::Paused => {
                let recorded_where = to.clone();
                if t.state != InstanceState::Paused
                    || t.executor != to
                    || may_hold_instance(t.state)
                {
                    again |=
                        !settle(cluster, &rec, task, t, view, Want::Paused, recorded_where).await?;
                }
            }
            TargetState::Started | TargetState::Stopped => {
                let moved = to != t.executor;
                match start_or_keep(cluster, t, view, to.as_deref(), t.restart || moved) {
                    Next::Keep => {}
                    Next::Wait => again = true,
                    Next::Start { stop_first } => {
                        if stop_first {
                            stop_false(cluster, &rec, task, t, view).await;
                        }
                        starts.push((Some(i), to));
                    }
                }
            }
        }
    }
    // Every task to start was stopped above (if something ran); now they start together.
    start_units(cluster, name, &starts, view).await?;
    Ok(if again { Pass::Again } else { Pass::Done })
}

/// Tasks of `rec` that the table would start again (their host is lost, or they have
/// none) and that no executor can take: each paired with no executor, for
/// [`start_units`] to record unassigned.
fn tasks_with_nowhere_to_run(
    cluster: &Cluster,
    rec: &ConnectorRecord,
    view: &ExecutorView,
) -> Vec<(Option<usize>, Option<String>)> {
    rec.tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| {
            matches!(
                start_or_keep(cluster, t, view, None, false),
                Next::Start { stop_first: false }
            )
        })
        .map(|(i, _)| (Some(i), None))
        .collect()
}

/// What to do with a unit that should run.
enum Next {
    Keep,
    Wait,
    Start {
        /// Stop the instance still hosted (with false) before the new one starts.
        stop_first: bool,
    },
}

/// The table's answer for a unit that should run, with the herder's own reasons to
/// replace an instance (`replace`: a restart, a changed config, a move), and no start
/// toward an executor whose calls wait for their backoff.
fn start_or_keep(
    cluster: &Cluster,
    inst: &Instance,
    view: &ExecutorView,
    to: Option<&str>,
    replace: bool,
) -> Next {
    let host = host_of(inst, view);
    let action = decide(Want::Started, hosted_for_herder(inst.state, host), host);
    let start = match action {
        Action::Start => true,
        Action::Keep => replace && host == Host::Live,
        Action::Wait => return Next::Wait,
        // Not answers for a unit that should run.
        Action::Stop { .. } | Action::Record | Action::CleanupOnly | Action::Done => false,
    };
    if !start {
        return Next::Keep;
    }
    if to.is_some_and(|id| cluster.executors.reach_blocked(id)) {
        return Next::Wait;
    }
    Next::Start {
        stop_first: host == Host::Live && may_hold_instance(inst.state),
    }
}

/// Brings a unit of a PAUSED or STOPPED connector to rest: whatever instance still exists
/// is stopped itself with false ([`decide`]), then it is recorded paused (on `paused_on`)
/// or stopped (unassigned). Returns false when it must be looked at again (a silent host,
/// a stop that did not reach its executor).
async fn settle(
    cluster: &Cluster,
    rec: &ConnectorRecord,
    task: Option<u32>,
    inst: &Instance,
    view: &ExecutorView,
    want: Want,
    paused_on: Option<String>,
) -> Result<bool, HerderError> {
    let host = host_of(inst, view);
    match decide(want, Hosted::from_recorded(inst.state), host) {
        Action::Stop { connector_deleted } => {
            debug_assert!(!connector_deleted, "the herder never stops with true");
            if inst
                .executor
                .as_deref()
                .is_some_and(|e| cluster.executors.reach_blocked(e))
            {
                // Its calls wait for their backoff: looked at again on a later pass.
                return Ok(false);
            }
            if !stop_false(cluster, rec, task, inst, view).await {
                return Ok(false);
            }
        }
        Action::Record => {}
        Action::Wait => return Ok(false),
        // Not answers for PAUSED or STOPPED.
        Action::Keep | Action::Start | Action::CleanupOnly | Action::Done => {}
    }
    let generation = inst.generation;
    let paused = want == Want::Paused;
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
            if paused {
                cur.state = cur.state.on(InstanceEvent::Paused);
                cur.executor = paused_on.clone();
                cur.epoch = cur
                    .executor
                    .as_ref()
                    .and_then(|e| view.all.get(e))
                    .map_or(0, |e| e.epoch);
            } else {
                cur.state = cur.state.on(InstanceEvent::Stopped);
                cur.executor = None;
                cur.epoch = 0;
            }
            cur.error.clear();
            cur.restart = false;
            Some(())
        })
        .await?;
    Ok(true)
}

/// Sends a stop with `false` to the live host of `inst`, if it has one. Returns false
/// when the stop did not reach the executor (its outcome is unknown); a refusal
/// (NOT_FOUND: nothing there; FAILED_PRECONDITION: a newer generation or epoch) means no
/// instance of that generation remains.
async fn stop_false(
    cluster: &Cluster,
    rec: &ConnectorRecord,
    task: Option<u32>,
    inst: &Instance,
    view: &ExecutorView,
) -> bool {
    let name = rec.name.as_str();
    let Some(exec) = inst.executor.as_deref().and_then(|e| view.live(e)) else {
        return true;
    };
    if exec.epoch != inst.epoch {
        return true;
    }
    let call = StopCall {
        connector: name.to_owned(),
        task,
        generation: inst.generation,
        deletion: None,
        timeout_ms: 0,
        incarnation: rec.incarnation.clone(),
        executor_epoch: None,
        created_topics: Vec::new(),
    };
    match cluster
        .call(exec, CallKind::Stop, cluster.clients.stop_on(exec, &call))
        .await
    {
        Ok(s) => {
            info!(connector = %name, task = task, generation = inst.generation,
                executor = %exec.id, connector_deleted = false, outcome = ?s.outcome, error = %s.error, "stopped");
            cluster.herder_stops.note(
                (name.to_owned(), task, inst.generation),
                std::time::Instant::now(),
            );
            true
        }
        Err(e @ CallError::Refused { .. }) => {
            info!(connector = %name, task = task, generation = inst.generation,
                executor = %exec.id, error = %e, "stop refused; nothing of that generation runs there");
            true
        }
        Err(e @ CallError::Unreachable { .. }) => {
            warn!(connector = %name, task = task, generation = inst.generation,
                executor = %exec.id, error = %e, "stop failed");
            false
        }
    }
}

/// Asks the connector instance for task configs and applies them: surplus tasks are
/// stopped with `false` and forgotten first, then changed tasks are marked for restart.
async fn compute_task_configs(
    cluster: &Cluster,
    rec: &ConnectorRecord,
    view: &ExecutorView,
) -> Result<(), HerderError> {
    let Some(exec) = rec.connector.executor.as_deref().and_then(|e| view.live(e)) else {
        return Ok(());
    };
    if cluster.executors.reach_blocked(&exec.id) {
        // Asked again once its calls' backoff ends.
        return Ok(());
    }
    let generation = rec.connector.generation;
    let mut configs = match cluster
        .call(
            exec,
            CallKind::TaskConfigs,
            cluster
                .clients
                .task_configs_on(exec, &rec.name, rec.tasks_max, generation),
        )
        .await
    {
        Ok(c) => c,
        Err(e) => {
            warn!(connector = %rec.name, generation, executor = %exec.id, error = %e, "task configs failed");
            return Ok(());
        }
    };
    configs.truncate(rec.tasks_max as usize);
    // Surplus tasks stop (false) before anything new starts, so that no more than
    // tasks.max tasks ever run.
    for i in configs.len()..rec.tasks.len() {
        let t = &rec.tasks[i];
        if may_hold_instance(t.state) {
            stop_false(cluster, rec, Some(i as u32), t, view).await;
        }
    }
    cluster
        .modify_connector_batched(&rec.name, |r| {
            if r.deleting || r.connector.generation != generation {
                return None;
            }
            if shares_moved(&r.config, r.task_configs.len(), configs.len()) {
                // Every kept task's partitions moved: each restarts with its new share.
                for t in &mut r.tasks {
                    t.restart = true;
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn live(ids: &[&str]) -> Vec<(String, u64)> {
        ids.iter().map(|id| ((*id).to_owned(), 7)).collect()
    }

    #[test]
    fn catch_up_waits_for_a_pass_over_every_connector_first() {
        assert_eq!(
            catch_up(false, false, 0, &live(&["a"]), |_, _| true),
            CatchUp::FirstPass
        );
    }

    #[test]
    fn catch_up_waits_for_a_connector_marked_for_the_next_pass() {
        assert_eq!(
            catch_up(true, true, 0, &live(&["a"]), |_, _| true),
            CatchUp::Marked
        );
    }

    #[test]
    fn catch_up_waits_for_the_reconciles_that_pass_spawned() {
        assert_eq!(
            catch_up(true, false, 3, &live(&["a"]), |_, _| true),
            CatchUp::Reconciling(3)
        );
    }

    #[test]
    fn catch_up_names_the_live_executors_not_yet_confirmed() {
        let got = catch_up(true, false, 0, &live(&["a", "b", "c"]), |id, epoch| {
            id == "b" && epoch == 7
        });
        assert_eq!(got, CatchUp::Unconfirmed(vec!["a".into(), "c".into()]));
    }

    #[test]
    fn catch_up_is_done_once_every_live_executor_confirmed() {
        assert_eq!(
            catch_up(true, false, 0, &live(&["a", "b"]), |_, _| true),
            CatchUp::Done
        );
    }

    #[test]
    fn catch_up_without_live_executors_needs_only_the_pass() {
        assert_eq!(catch_up(true, false, 0, &[], |_, _| false), CatchUp::Done);
    }

    /// Every (recorded state, host) cell of [`hosted_for_herder`], each once.
    #[test]
    fn every_cell_of_how_the_herder_reads_a_record() {
        use Hosted::{Absent, Failed, Running, Starting};
        use InstanceState as S;
        let cells = [
            // A start whose answer was lost, on a live host: a new start fences it.
            (S::Restarting, Host::Live, Absent),
            // On a host that is not live it may still run there: wait, or start elsewhere.
            (S::Restarting, Host::Unresponsive, Starting),
            (S::Restarting, Host::Lost, Starting),
            (S::Unassigned, Host::Live, Absent),
            (S::Unassigned, Host::Unresponsive, Absent),
            (S::Unassigned, Host::Lost, Absent),
            (S::Paused, Host::Live, Absent),
            (S::Paused, Host::Unresponsive, Absent),
            (S::Paused, Host::Lost, Absent),
            (S::Stopped, Host::Live, Absent),
            (S::Stopped, Host::Unresponsive, Absent),
            (S::Stopped, Host::Lost, Absent),
            (S::Running, Host::Live, Running),
            (S::Running, Host::Unresponsive, Running),
            (S::Running, Host::Lost, Running),
            // A failed instance stays on its executor until stopped.
            (S::Failed, Host::Live, Failed),
            (S::Failed, Host::Unresponsive, Failed),
            (S::Failed, Host::Lost, Failed),
        ];
        for (state, host, want) in cells {
            assert_eq!(
                hosted_for_herder(state, host),
                want,
                "({state:?}, {host:?})"
            );
        }
        let states = [
            S::Unassigned,
            S::Restarting,
            S::Running,
            S::Paused,
            S::Stopped,
            S::Failed,
        ];
        for s in states {
            for h in [Host::Live, Host::Unresponsive, Host::Lost] {
                let n = cells.iter().filter(|c| c.0 == s && c.1 == h).count();
                assert_eq!(n, 1, "cell ({s:?}, {h:?}) listed {n} times");
            }
        }
    }

    #[test]
    fn the_plan_is_grouped_by_connector_with_every_unit_once() {
        let key = |c: &str, task: Option<u32>| UnitKey {
            connector: c.to_owned(),
            task,
        };
        let desired = HashMap::from([
            (key("a", None), Some("e1".to_owned())),
            (key("a", Some(0)), Some("e2".to_owned())),
            (key("a", Some(1)), None),
            (key("b", None), Some("e1".to_owned())),
        ]);
        let grouped = by_connector(desired);
        assert_eq!(grouped.len(), 2);
        assert_eq!(
            grouped["a"],
            BTreeMap::from([
                (None, Some("e1".to_owned())),
                (Some(0), Some("e2".to_owned())),
                (Some(1), None),
            ])
        );
        assert_eq!(
            grouped["b"],
            BTreeMap::from([(None, Some("e1".to_owned()))])
        );
        assert!(by_connector(HashMap::new()).is_empty());
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_pass_after_a_failed_pass_or_a_wake_covers_everything() {
        assert!(covers_everything(true, false, false, Some(MS(1)), MS(0)));
        assert!(covers_everything(true, false, true, Some(MS(1)), MS(500)));
    }

    #[test]
    fn a_pass_after_the_live_executors_changed_covers_everything() {
        assert!(covers_everything(false, true, false, Some(MS(1)), MS(500)));
    }

    #[test]
    fn the_first_pass_covers_everything() {
        assert!(covers_everything(false, false, false, None, MS(0)));
    }

    #[test]
    fn a_busy_herder_covers_everything_once_per_full_pass_interval() {
        let interval = MS(FULL_PASS_INTERVAL_MS);
        assert!(!covers_everything(
            false,
            false,
            false,
            Some(interval - MS(1)),
            MS(5)
        ));
        assert!(covers_everything(
            false,
            false,
            false,
            Some(interval),
            MS(5)
        ));
    }

    #[test]
    fn an_idle_herder_covers_everything_on_its_timer() {
        let interval = MS(RECONCILE_INTERVAL_MS);
        assert!(!covers_everything(
            false,
            false,
            true,
            Some(interval - MS(1)),
            MS(5)
        ));
        assert!(covers_everything(false, false, true, Some(interval), MS(5)));
    }

    #[test]
    fn full_passes_on_the_clock_take_at_most_a_tenth_of_the_time() {
        // A full pass that took 300 ms waits 3 s, busy or idle.
        let cost = MS(300);
        let wait = cost * FULL_PASS_COST_FACTOR;
        for timer in [false, true] {
            assert!(!covers_everything(
                false,
                false,
                timer,
                Some(wait - MS(1)),
                cost
            ));
            assert!(covers_everything(false, false, timer, Some(wait), cost));
        }
    }

    #[test]
    fn only_running_failed_or_starting_instances_may_still_be_held() {
        use InstanceState as S;
        for (s, held) in [
            (S::Unassigned, false),
            (S::Restarting, true),
            (S::Running, true),
            (S::Paused, false),
            (S::Stopped, false),
            (S::Failed, true),
        ] {
            assert_eq!(may_hold_instance(s), held, "{s:?}");
        }
    }
}
