//! The task host: connector instances and tasks of this executor, keyed by connector name
//! and task id, each with the generations it has seen and the outcome of every stop.
//!
//! Instance guarantees (docs/architecture.md, "Connector SDK"): `start` runs once and first; `stop`
//! runs at most once, after `start` returned, never concurrently with `poll`/`put`/`flush`
//! (a pending `poll` is cancelled first); a stop is bounded by its timeout, after which the
//! instance is abandoned, reported FAILED and its output fenced; it is shown abandoned (in
//! ListAssignments and stop answers) until its plugin call returns. Every plugin call runs
//! as a spawned task on the executor's plugin runtime (`crate::runtime`), so that a panic
//! fails only that instance and a blocked call holds one plugin worker, never the
//! executor's own runtime.
//!
//! Stops are fenced three ways (docs/contract.md, "Executor self-fencing"): by
//! generation, by the executor epoch and the connector incarnation they were decided
//! under, and by the lease: a destructive stop (`connector_deleted = true`) is refused
//! while the lease may have expired, and confirmed against the lease again just before
//! the plugin's stop runs (else it runs with `false`).
//!
//! Status reports: a start reports its outcome; a work loop that fails reports FAILED; a
//! stop asked for by the control plane reports only a failure or a timeout (the StopTask
//! response carries the rest); a stop the executor decides itself (shutdown, fencing, a
//! superseding generation) reports UNASSIGNED.

mod connector;
mod error;
mod instance;
mod task;
mod validate;

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use wharf::ids::TaskKey;
use wharf::sdk::{ConfigMap, Plugin};
use wharf::task::{TaskKind, spawn};

use crate::log::RecordLog;
use crate::registry_client::{LeaseStanding, Registry};
use crate::runtime::PluginPool;

pub use error::HostError;
pub use instance::{InstanceState, StopOutcome, StopRecord, StopResult};
pub use task::{
    LOG_RETRY_BACKOFF_MS, OFFSET_COMMIT_INTERVAL_MS, OFFSET_COMMIT_RETRY_BACKOFF_MS,
    SINK_BATCH_MAX_RECORDS, SINK_FETCH_WAIT_MS, SINK_FLUSH_INTERVAL_MS, SINK_FLUSH_MAX_RECORDS,
    STOP_DRAIN_TIMEOUT_MS, TOPICS,
};

use connector::ConnectorInstance;
use task::TaskInstance;

/// Least time a connector instance gets for its stop when the tasks used up the shutdown
/// budget.
pub const MIN_STOP_TIMEOUT_MS: u64 = 100;

use wharf::sdk::CONNECTOR_CLASS;

/// A StartConnector request, validated.
#[derive(Debug, Clone)]
pub struct StartConnector {
    /// Connector name.
    pub connector: String,
    /// Full connector config.
    pub config: ConfigMap,
    /// Assignment generation.
    pub generation: u64,
    /// True when the target state is PAUSED.
    pub paused: bool,
    /// Start only for a following stop(true).
    pub cleanup_only: bool,
    /// The connector's incarnation id.
    pub incarnation: String,
    /// The epoch addressed; 0 skips the check.
    pub executor_epoch: u64,
}

/// A StartTask request, validated.
#[derive(Debug, Clone)]
pub struct StartTask {
    /// Which task.
    pub task: TaskKey,
    /// The connector's config.
    pub connector_config: ConfigMap,
    /// The task's config.
    pub task_config: ConfigMap,
    /// Assignment generation.
    pub generation: u64,
    /// True when the target state is PAUSED: started, but no poll or put.
    pub paused: bool,
    /// Start only for a following stop(true): no poll or put.
    pub cleanup_only: bool,
    /// Committed offsets, keyed by the canonical JSON text of the partition.
    pub offsets: BTreeMap<String, serde_json::Value>,
    /// The connector's incarnation id.
    pub incarnation: String,
    /// The epoch addressed; 0 skips the check.
    pub executor_epoch: u64,
}

/// A StopTask or StopConnector request, validated.
#[derive(Debug, Clone, Default)]
pub struct StopRequest {
    /// True only for a deletion.
    pub connector_deleted: bool,
    /// Generation of the assignment being stopped.
    pub generation: u64,
    /// Bound on the plugin's stop, in milliseconds; 0 means the default.
    pub timeout_ms: u32,
    /// Incarnation the stop was decided for; empty skips the check.
    pub incarnation: String,
    /// The epoch the stop was decided under; 0 skips the check.
    pub executor_epoch: u64,
}

/// A hosted instance as ListAssignments shows it.
#[derive(Debug, Clone)]
pub struct Hosted<K> {
    /// Connector name or task id.
    pub key: K,
    /// Generation.
    pub generation: u64,
    /// Current state.
    pub state: InstanceState,
    /// Started in cleanup-only mode.
    pub cleanup_only: bool,
    /// Stop timed out and the plugin's call has not returned.
    pub abandoned: bool,
    /// Incarnation of the connector.
    pub incarnation: String,
}

/// Whether [`Host::assignments`] lists an instance: until its stop ended, and after that
/// while it is abandoned (its plugin call has not returned).
fn listed(stop_claimed: bool, state: &InstanceState, abandoned: bool) -> bool {
    match state {
        _ if !stop_claimed || abandoned => true,
        InstanceState::Stopping => true,
        InstanceState::Starting
        | InstanceState::Running
        | InstanceState::Paused
        | InstanceState::Failed(_)
        | InstanceState::Stopped => false,
    }
}

/// A stop's result and whether the instance is abandoned now.
#[derive(Debug, Clone)]
pub struct StopAnswer {
    /// The stop's record, replayed or not.
    pub result: StopResult,
    /// True while the instance is abandoned (its plugin call has not returned).
    pub abandoned: bool,
}

/// Every instance ever created for one key, by generation, and the newest generation seen.
struct Slot<I> {
    newest: u64,
    instances: BTreeMap<u64, Arc<I>>,
}

impl<I> Default for Slot<I> {
    fn default() -> Self {
        Self {
            newest: 0,
            instances: BTreeMap::new(),
        }
    }
}

/// What the instances of this executor share.
pub(crate) struct Shared {
    /// This executor's id.
    pub executor_id: String,
    /// Registry client: status reports, offset commits, the current epoch.
    pub registry: Arc<Registry>,
    /// Record log for source and sink tasks.
    pub log: Arc<dyn RecordLog>,
    /// Where the instances' plugin calls run.
    pub pool: PluginPool,
}

impl Shared {
    /// The flag a stop runs with, decided just before the plugin's stop is called: a
    /// destructive stop runs only while the lease certainly holds; otherwise it runs with
    /// `false` (the deletion then re-hosts its cleanup) and a heartbeat is asked for, which
    /// fences this executor.
    pub fn confirm_deleted(&self, connector_deleted: bool, what: &str) -> bool {
        if !connector_deleted {
            return false;
        }
        match self.registry.lease_standing() {
            LeaseStanding::Held => true,
            standing @ (LeaseStanding::Unregistered | LeaseStanding::MayHaveExpired) => {
                tracing::warn!(
                    what,
                    ?standing,
                    "lease may have expired before the plugin's stop(true): stopping with connector_deleted=false instead"
                );
                self.registry.beat_now();
                false
            }
        }
    }
}

/// Why a request is refused under `standing`, or `None` when it may go on. Destructive
/// stops and starts that address an epoch need a lease that certainly holds.
fn lease_refusal(standing: LeaseStanding, what: &str) -> Option<HostError> {
    let standing = match standing {
        LeaseStanding::Held => return None,
        LeaseStanding::Unregistered => "not registered",
        LeaseStanding::MayHaveExpired => "lease may have expired",
    };
    Some(HostError::LeaseMayHaveExpired {
        what: what.to_owned(),
        standing,
    })
}

/// The connector instances and tasks of this executor.
pub struct Host {
    shared: Arc<Shared>,
    plugins: HashMap<String, Plugin>,
    default_stop_timeout: Duration,
    tasks: Mutex<HashMap<TaskKey, Slot<TaskInstance>>>,
    connectors: Mutex<HashMap<String, Slot<ConnectorInstance>>>,
    /// Set once shutdown began: no new instance may start behind `stop_all`'s back.
    closing: std::sync::atomic::AtomicBool,
}

/// Locks a std mutex, recovering from poisoning (the maps stay consistent: every update is
/// one insert or field write).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Host {
    /// A host running `plugins` on a plugin runtime of `plugin_threads` workers; a stop
    /// whose request says 0 ms gets `default_stop_timeout`.
    ///
    /// # Errors
    /// The plugin runtime could not be started (the OS refused its threads).
    pub fn new(
        executor_id: String,
        plugins: Vec<Plugin>,
        registry: Arc<Registry>,
        log: Arc<dyn RecordLog>,
        default_stop_timeout: Duration,
        plugin_threads: NonZeroUsize,
    ) -> std::io::Result<Self> {
        Ok(Self {
            shared: Arc::new(Shared {
                executor_id,
                registry,
                log,
                pool: PluginPool::start(plugin_threads)?,
            }),
            plugins: plugins.into_iter().map(|p| (p.name.clone(), p)).collect(),
            default_stop_timeout,
            tasks: Mutex::new(HashMap::new()),
            connectors: Mutex::new(HashMap::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Checks `config` with plugin `plugin`'s full definition (the runtime's keys, then
    /// the plugin's, validators included): `(key, messages)` for each key with an error,
    /// in definition order, secret values never in a message. `None` when this executor
    /// does not host `plugin`. Runs no plugin instance and changes nothing; a validator
    /// runs on a blocking thread, so that a slow one holds no request worker.
    ///
    /// # Errors
    /// A validator panicked (the text of the panic).
    pub async fn validate_config(
        &self,
        plugin: &str,
        config: ConfigMap,
    ) -> Option<Result<Vec<(String, Vec<String>)>, String>> {
        let def = wharf::sdk::runtime_config_def().merged(&self.plugins.get(plugin)?.config_def);
        Some(
            tokio::task::spawn_blocking(move || validate::key_errors(&def, &config))
                .await
                .map_err(panic_text),
        )
    }

    /// This executor's id.
    pub fn executor_id(&self) -> &str {
        &self.shared.executor_id
    }

    /// The current registration epoch (0 before the first registration).
    pub fn epoch(&self) -> u64 {
        self.shared.registry.epoch()
    }

    /// Where this executor stands with its lease.
    pub fn lease_standing(&self) -> LeaseStanding {
        self.shared.registry.lease_standing()
    }

    /// Refuses every later start; called before the shutdown's `stop_all`.
    pub fn close(&self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Refuses a start that addresses another epoch, or any epoch while the lease may
    /// have expired.
    fn check_epoch(&self, requested: u64, what: &str) -> Result<(), HostError> {
        if self.closing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(HostError::ShuttingDown);
        }
        if requested == 0 {
            return Ok(());
        }
        let current = self.epoch();
        if requested != current {
            return Err(HostError::EpochMismatch { requested, current });
        }
        match lease_refusal(self.shared.registry.lease_standing(), what) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Refuses a stop decided under another epoch, or a destructive stop while the lease
    /// may have expired (asking for a heartbeat, which fences this executor).
    fn check_stop(&self, req: &StopRequest, what: &str) -> Result<(), HostError> {
        let current = self.epoch();
        if req.executor_epoch != 0 && req.executor_epoch != current {
            return Err(HostError::EpochMismatch {
                requested: req.executor_epoch,
                current,
            });
        }
        if !req.connector_deleted {
            return Ok(());
        }
        match lease_refusal(self.shared.registry.lease_standing(), what) {
            Some(e) => {
                self.shared.registry.beat_now();
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Admits a stop of the instance keyed `key` in `slots`. A stop whose generation's
    /// instance already had its stop claimed (completed, or still running) is answered
    /// from that stop's record first, before any epoch, lease or generation check: a
    /// retried stop (a lost answer, a control-plane failover, this executor fenced and
    /// registered again since) learns what happened and runs nothing (see
    /// [`stop_admission`]). Every other stop passes every check (epoch, lease,
    /// generation, incarnation), then gets the instance [`pick_for_stop`] chooses. A
    /// refusal is logged here, once, with what the request named: nothing ran for it.
    fn admit_stop<K, I>(
        &self,
        req: &StopRequest,
        what: &str,
        slots: &Mutex<HashMap<K, Slot<I>>>,
        key: &K,
    ) -> Result<Arc<I>, HostError>
    where
        K: std::hash::Hash + Eq,
        I: StopFacts,
    {
        let replay = {
            let map = lock(slots);
            map.get(key)
                .and_then(|slot| slot.instances.get(&req.generation))
                .filter(|i| stop_admission(req, Some(&***i)) == StopAdmission::Replay)
                .cloned()
        };
        if let Some(instance) = replay {
            tracing::info!(
                what,
                generation = req.generation,
                executor_epoch = req.executor_epoch,
                connector_deleted = req.connector_deleted,
                "stop of this generation already claimed: answered from its record, nothing runs again"
            );
            return Ok(instance);
        }
        let admitted = self
            .check_stop(req, &format!("stop(true) of {what}"))
            .and_then(|()| {
                let map = lock(slots);
                let slot = map
                    .get(key)
                    .ok_or_else(|| HostError::NotHosted(what.to_owned()))?;
                pick_for_stop(slot, req, what, |i: &I| (i.stop_claimed(), i.incarnation()))
            });
        if let Err(e) = &admitted {
            // NOT_FOUND is an ordinary answer (the control plane re-hosts the cleanup);
            // every other refusal is a stop decided for something this executor does not
            // run now, worth an operator's look.
            let not_hosted = matches!(e, HostError::NotHosted(_));
            if not_hosted {
                tracing::info!(what, generation = req.generation, error = %e, "stop refused");
            } else {
                tracing::warn!(what, generation = req.generation, incarnation = %req.incarnation,
                    executor_epoch = req.executor_epoch, connector_deleted = req.connector_deleted,
                    error = %e, "stop refused; nothing ran");
            }
        }
        admitted
    }

    fn plugin_for(&self, config: &ConfigMap, field: &str) -> Result<Plugin, HostError> {
        let class = config
            .get(CONNECTOR_CLASS)
            .ok_or_else(|| HostError::InvalidArgument {
                field: format!("{field}.{CONNECTOR_CLASS}"),
                reason: "missing".into(),
            })?;
        self.plugins
            .get(class)
            .cloned()
            .ok_or_else(|| HostError::UnknownPlugin(class.clone()))
    }

    fn stop_timeout(&self, timeout_ms: u32) -> Duration {
        if timeout_ms == 0 {
            self.default_stop_timeout
        } else {
            Duration::from_millis(u64::from(timeout_ms))
        }
    }

    /// Starts a task (or returns the state of the same generation already started).
    ///
    /// # Errors
    /// Epoch mismatch, stale or stopped generation, unknown plugin. A plugin failure is
    /// not an error: the state says FAILED.
    pub async fn start_task(&self, req: StartTask) -> Result<InstanceState, HostError> {
        let what = format!("task {}", req.task);
        self.check_epoch(req.executor_epoch, &format!("start of {what}"))?;
        let plugin = self.plugin_for(&req.connector_config, "connector_config")?;
        let (instance, superseded) = {
            let mut tasks = lock(&self.tasks);
            let slot = tasks.entry(req.task.clone()).or_default();
            if req.generation < slot.newest {
                return Err(HostError::StaleGeneration {
                    what,
                    requested: req.generation,
                    newest: slot.newest,
                });
            }
            if let Some(existing) = slot.instances.get(&req.generation) {
                if existing.life.stop_claimed() {
                    return Err(HostError::GenerationStopped {
                        what,
                        generation: req.generation,
                    });
                }
                return Ok(existing.life.state());
            }
            let superseded: Vec<_> = slot
                .instances
                .values()
                .filter(|i| !i.life.stop_claimed())
                .cloned()
                .collect();
            let instance = Arc::new(
                TaskInstance::new(&plugin, &req, self.shared.clone())
                    .map_err(|reason| HostError::PluginRuntime { what, reason })?,
            );
            slot.newest = req.generation;
            slot.instances.insert(req.generation, instance.clone());
            (instance, superseded)
        };
        let timeout = self.default_stop_timeout;
        // Spawned so that a cancelled request does not cut the start in half.
        let handle = spawn(TaskKind::Awaited, "start task", async move {
            for old in superseded {
                old.stop(false, timeout, true).await;
            }
            instance.start(req).await
        });
        Ok(handle
            .await
            .unwrap_or_else(|e| InstanceState::Failed(panic_text(e))))
    }

    /// Stops a task as `req` says (its timeout 0: the default).
    ///
    /// # Errors
    /// NotHosted when this executor never had the task (or that generation),
    /// StaleGeneration when a newer generation was seen, EpochMismatch and
    /// StaleIncarnation when the stop was decided for another epoch or incarnation,
    /// LeaseMayHaveExpired for a destructive stop while the lease may have run out.
    pub async fn stop_task(
        &self,
        task: &TaskKey,
        req: &StopRequest,
    ) -> Result<StopAnswer, HostError> {
        let what = format!("task {task}");
        let instance = self.admit_stop(req, &what, &self.tasks, task)?;
        let result = instance
            .stop(
                req.connector_deleted,
                self.stop_timeout(req.timeout_ms),
                false,
            )
            .await;
        Ok(StopAnswer {
            result,
            abandoned: instance.abandoned(),
        })
    }

    /// Starts a connector instance (or returns the state of the same generation).
    ///
    /// # Errors
    /// As [`Host::start_task`].
    pub async fn start_connector(&self, req: StartConnector) -> Result<InstanceState, HostError> {
        let what = format!("connector {}", req.connector);
        self.check_epoch(req.executor_epoch, &format!("start of {what}"))?;
        let plugin = self.plugin_for(&req.config, "config")?;
        let (instance, superseded) = {
            let mut connectors = lock(&self.connectors);
            let slot = connectors.entry(req.connector.clone()).or_default();
            if req.generation < slot.newest {
                return Err(HostError::StaleGeneration {
                    what,
                    requested: req.generation,
                    newest: slot.newest,
                });
            }
            if let Some(existing) = slot.instances.get(&req.generation) {
                if existing.life.stop_claimed() {
                    return Err(HostError::GenerationStopped {
                        what,
                        generation: req.generation,
                    });
                }
                return Ok(existing.life.state());
            }
            let superseded: Vec<_> = slot
                .instances
                .values()
                .filter(|i| !i.life.stop_claimed())
                .cloned()
                .collect();
            let instance = Arc::new(
                ConnectorInstance::new(&plugin, &req, self.shared.clone())
                    .map_err(|reason| HostError::PluginRuntime { what, reason })?,
            );
            slot.newest = req.generation;
            slot.instances.insert(req.generation, instance.clone());
            (instance, superseded)
        };
        let timeout = self.default_stop_timeout;
        let handle = spawn(TaskKind::Awaited, "start connector", async move {
            for old in superseded {
                old.stop(false, timeout, true).await;
            }
            instance.start(req).await
        });
        Ok(handle
            .await
            .unwrap_or_else(|e| InstanceState::Failed(panic_text(e))))
    }

    /// Asks a running connector instance for at most `max_tasks` task configs.
    ///
    /// # Errors
    /// NotHosted, StaleGeneration, NotRunning, TaskConfigsFailed.
    pub async fn task_configs(
        &self,
        connector: &str,
        max_tasks: u32,
        generation: u64,
    ) -> Result<Vec<ConfigMap>, HostError> {
        let what = format!("connector {connector}");
        let instance = {
            let connectors = lock(&self.connectors);
            let slot = connectors
                .get(connector)
                .ok_or_else(|| HostError::NotHosted(what.clone()))?;
            if generation < slot.newest {
                return Err(HostError::StaleGeneration {
                    what,
                    requested: generation,
                    newest: slot.newest,
                });
            }
            slot.instances
                .get(&generation)
                .cloned()
                .ok_or_else(|| HostError::NotHosted(format!("{what} generation {generation}")))?
        };
        instance.task_configs(max_tasks).await
    }

    /// Stops a connector instance as `req` says; a sink connector stopped with `true`
    /// also loses its log consumer.
    ///
    /// # Errors
    /// As [`Host::stop_task`].
    pub async fn stop_connector(
        &self,
        connector: &str,
        req: &StopRequest,
    ) -> Result<StopAnswer, HostError> {
        let what = format!("connector {connector}");
        let instance = self.admit_stop(req, &what, &self.connectors, &connector.to_owned())?;
        let result = instance
            .stop(
                req.connector_deleted,
                self.stop_timeout(req.timeout_ms),
                false,
            )
            .await;
        Ok(StopAnswer {
            result,
            abandoned: instance.abandoned(),
        })
    }

    /// Connector instances and tasks not yet stopped (a stop under way included: the
    /// instance still holds what it holds until its stop returned or timed out), and those
    /// abandoned whose plugin call has not returned (`abandoned = true`).
    pub fn assignments(&self) -> (Vec<Hosted<String>>, Vec<Hosted<TaskKey>>) {
        let connectors = lock(&self.connectors)
            .iter()
            .flat_map(|(name, slot)| {
                slot.instances
                    .values()
                    .map(move |i| (name.clone(), i.clone()))
            })
            .filter(|(_, i)| listed(i.life.stop_claimed(), &i.life.state(), i.abandoned()))
            .map(|(key, i)| Hosted {
                key,
                generation: i.life.generation,
                state: i.life.state(),
                cleanup_only: i.life.cleanup_only,
                abandoned: i.abandoned(),
                incarnation: i.incarnation.clone(),
            })
            .collect();
        let tasks = lock(&self.tasks)
            .iter()
            .flat_map(|(key, slot)| {
                slot.instances
                    .values()
                    .map(move |i| (key.clone(), i.clone()))
            })
            .filter(|(_, i)| listed(i.life.stop_claimed(), &i.life.state(), i.abandoned()))
            .map(|(key, i)| Hosted {
                key,
                generation: i.life.generation,
                state: i.life.state(),
                cleanup_only: i.life.cleanup_only,
                abandoned: i.abandoned(),
                incarnation: i.incarnation.clone(),
            })
            .collect();
        (connectors, tasks)
    }

    /// Record counts of the tasks [`Host::assignments`] lists (abandoned ones left out:
    /// their work loop ended), one entry per task summed over its generations, with
    /// whether it is a source.
    pub fn task_stats(&self) -> Vec<(TaskKey, bool, crate::counters::RecordStats)> {
        let mut out: Vec<(TaskKey, bool, crate::counters::RecordStats)> = Vec::new();
        let tasks = lock(&self.tasks);
        let mut keys: Vec<&TaskKey> = tasks.keys().collect();
        keys.sort_by(|a, b| (&a.connector, a.task).cmp(&(&b.connector, b.task)));
        for key in keys {
            let live: Vec<_> = tasks[key]
                .instances
                .values()
                .filter(|i| !i.life.stop_claimed())
                .collect();
            let Some(first) = live.first() else { continue };
            let sum = crate::counters::RecordStats::default();
            for i in &live {
                i.stats.add_into(&sum);
            }
            out.push((key.clone(), first.is_source(), sum));
        }
        out
    }

    /// Stops every instance with `connector_deleted = false` (shutdown, fencing): tasks
    /// first, then connector instances, in parallel, all within `timeout`.
    pub async fn stop_all(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        let tasks: Vec<_> = lock(&self.tasks)
            .values()
            .flat_map(|s| s.instances.values().cloned())
            .filter(|i| !i.life.stop_claimed())
            .collect();
        join_all(tasks.iter().map(|t| t.stop(false, timeout, true))).await;
        let connectors: Vec<_> = lock(&self.connectors)
            .values()
            .flat_map(|s| s.instances.values().cloned())
            .filter(|i| !i.life.stop_claimed())
            .collect();
        let remaining = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .max(Duration::from_millis(MIN_STOP_TIMEOUT_MS));
        join_all(connectors.iter().map(|c| c.stop(false, remaining, true))).await;
    }
}

/// What a stop's admission needs to know of an instance: whether its stop was claimed
/// (it ran, or runs now) and the incarnation it belongs to.
trait StopFacts {
    fn stop_claimed(&self) -> bool;
    fn incarnation(&self) -> &str;
}

impl StopFacts for TaskInstance {
    fn stop_claimed(&self) -> bool {
        self.life.stop_claimed()
    }
    fn incarnation(&self) -> &str {
        &self.incarnation
    }
}

impl StopFacts for ConnectorInstance {
    fn stop_claimed(&self) -> bool {
        self.life.stop_claimed()
    }
    fn incarnation(&self) -> &str {
        &self.incarnation
    }
}

/// How a stop is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopAdmission {
    /// The instance's stop was already claimed: answer from its record (waiting for it
    /// if it still runs), before any staleness check; nothing runs again.
    Replay,
    /// Nothing to replay: every staleness check applies, then [`pick_for_stop`].
    Check,
}

/// The replay rule (docs/contract.md, "Executor self-fencing"): a stop of a generation
/// whose instance here already had its stop claimed is answered from that stop's record,
/// whatever epoch it names and wherever the lease stands, because answering what
/// happened runs nothing, while refusing it would make the control plane run the cleanup
/// a second time in a cleanup-only instance (a retried stop after a control-plane
/// failover, or after this executor fenced itself and registered again). A stop of
/// another incarnation never gets another connector's record. `at_generation` is the
/// instance of the stop's generation, if this executor has one.
fn stop_admission(req: &StopRequest, at_generation: Option<&dyn StopFacts>) -> StopAdmission {
    match at_generation {
        None => StopAdmission::Check,
        Some(i) => match (
            i.stop_claimed(),
            incarnation_matches(&req.incarnation, i.incarnation()),
        ) {
            (true, true) => StopAdmission::Replay,
            (true, false) | (false, true | false) => StopAdmission::Check,
        },
    }
}

/// The instance a stop applies to, and whether it may run at all.
///
/// - A generation this executor was assigned: that generation's instance (a replay when
///   already stopped), if the stop names its incarnation or none.
/// - An older generation it was not assigned: stale.
/// - A newer generation: it was never assigned here, so the stop is refused unless it
///   names the incarnation of the instance still running. That one exception is the
///   control plane's record running ahead of this executor (a start it recorded whose
///   request never arrived); the record's stop must still reach the instance that runs
///   (docs/contract.md, "Executor self-fencing"). A stop without an incarnation, or with
///   another one, for a generation never assigned here runs nothing (issue 14: any
///   caller could otherwise stop, or drop the resources of, a live connector with
///   "current generation + 1000").
///
/// `facts` says of an instance whether its stop was claimed, and its incarnation.
fn pick_for_stop<'a, I: 'a>(
    slot: &'a Slot<I>,
    req: &StopRequest,
    what: &str,
    facts: impl Fn(&'a I) -> (bool, &'a str),
) -> Result<Arc<I>, HostError> {
    let generation = req.generation;
    if let Some(i) = slot.instances.get(&generation) {
        check_incarnation(&req.incarnation, facts(i).1, what)?;
        return Ok(i.clone());
    }
    if generation < slot.newest {
        return Err(HostError::StaleGeneration {
            what: what.to_owned(),
            requested: generation,
            newest: slot.newest,
        });
    }
    let running = slot.instances.values().rev().find(|i| !facts(i).0);
    match running {
        None => Err(HostError::NotHosted(format!(
            "{what} generation {generation}"
        ))),
        Some(i) if !req.incarnation.is_empty() && req.incarnation == facts(i).1 => Ok(i.clone()),
        Some(_) => Err(HostError::NeverAssigned {
            what: what.to_owned(),
            requested: generation,
            newest: slot.newest,
        }),
    }
}

/// Refuses a request decided for incarnation `requested` when the instance belongs to
/// `hosted` (either empty: not known, no check).
fn check_incarnation(requested: &str, hosted: &str, what: &str) -> Result<(), HostError> {
    if incarnation_matches(requested, hosted) {
        return Ok(());
    }
    Err(HostError::StaleIncarnation {
        what: what.to_owned(),
        requested: requested.to_owned(),
        hosted: hosted.to_owned(),
    })
}

/// True when a request for incarnation `requested` may address an instance of `hosted`
/// (either empty: not known, no check).
fn incarnation_matches(requested: &str, hosted: &str) -> bool {
    requested.is_empty() || hosted.is_empty() || requested == hosted
}

/// Text of a failed plugin call's join error (a panic message, or a cancellation).
pub(crate) fn panic_text(e: tokio::task::JoinError) -> String {
    if e.is_cancelled() {
        return "plugin call was cancelled".into();
    }
    let payload = e.into_panic();
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".into());
    format!("plugin panicked: {msg}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_listed_until_its_stop_ended() {
        let running = [
            InstanceState::Starting,
            InstanceState::Running,
            InstanceState::Paused,
            InstanceState::Failed("boom".into()),
        ];
        for s in &running {
            assert!(listed(false, s, false), "{s:?}");
        }
        // A stop under way (the plugin's call may still run): still listed.
        assert!(listed(true, &InstanceState::Stopping, false));
        // The stop ended: gone.
        assert!(!listed(true, &InstanceState::Stopped, false));
        assert!(!listed(
            true,
            &InstanceState::Failed("timed out".into()),
            false
        ));
    }

    #[test]
    fn an_abandoned_instance_is_listed_until_its_call_returned() {
        assert!(listed(
            true,
            &InstanceState::Failed("timed out".into()),
            true
        ));
    }

    /// Incarnation of every instance in [`slot`].
    const INC: &str = "inc-1";

    /// A slot whose instances are just "stop claimed" flags (incarnation [`INC`]), by
    /// generation.
    fn slot(instances: &[(u64, bool)]) -> Slot<(bool, &'static str)> {
        Slot {
            newest: instances.iter().map(|(g, _)| *g).max().unwrap_or(0),
            instances: instances
                .iter()
                .map(|(g, c)| (*g, Arc::new((*c, INC))))
                .collect(),
        }
    }

    /// The "stop claimed" flag of the instance picked for a stop of `generation` naming
    /// `incarnation`.
    fn pick_named(
        slot: &Slot<(bool, &'static str)>,
        generation: u64,
        incarnation: &str,
    ) -> Result<bool, HostError> {
        let req = StopRequest {
            generation,
            incarnation: incarnation.to_owned(),
            ..StopRequest::default()
        };
        pick_for_stop(slot, &req, "task t-0", |i| (i.0, i.1)).map(|i| i.0)
    }

    fn pick(slot: &Slot<(bool, &'static str)>, generation: u64) -> Result<bool, HostError> {
        pick_named(slot, generation, INC)
    }

    impl StopFacts for (bool, &'static str) {
        fn stop_claimed(&self) -> bool {
            self.0
        }
        fn incarnation(&self) -> &str {
            self.1
        }
    }

    fn admission(claimed_here: Option<bool>, incarnation: &str) -> StopAdmission {
        let req = StopRequest {
            generation: 3,
            incarnation: incarnation.to_owned(),
            // Stale on purpose: a replay is decided before any epoch check.
            executor_epoch: 1,
            connector_deleted: true,
            ..StopRequest::default()
        };
        let instance = claimed_here.map(|c| (c, INC));
        stop_admission(&req, instance.as_ref().map(|i| i as &dyn StopFacts))
    }

    #[test]
    fn a_stop_whose_generation_was_already_stopped_here_is_answered_from_the_record() {
        assert_eq!(admission(Some(true), INC), StopAdmission::Replay);
    }

    #[test]
    fn a_replay_without_an_incarnation_is_answered_from_the_record() {
        assert_eq!(admission(Some(true), ""), StopAdmission::Replay);
    }

    #[test]
    fn a_stop_of_another_incarnation_never_gets_the_record() {
        assert_eq!(admission(Some(true), "inc-0"), StopAdmission::Check);
    }

    #[test]
    fn a_first_stop_of_a_running_instance_passes_every_check() {
        assert_eq!(admission(Some(false), INC), StopAdmission::Check);
    }

    #[test]
    fn a_stop_of_a_generation_this_executor_has_no_instance_of_passes_every_check() {
        // The record is gone (this process never had it, or restarted): refused or
        // NOT_FOUND by the checks, and the control plane runs the cleanup again (at least
        // once).
        assert_eq!(admission(None, INC), StopAdmission::Check);
    }

    #[test]
    fn a_stop_of_another_incarnation_is_refused() {
        assert!(matches!(
            check_incarnation("old", "new", "task t-0"),
            Err(HostError::StaleIncarnation { .. })
        ));
    }

    #[test]
    fn a_stop_of_the_same_or_an_unknown_incarnation_goes_on() {
        assert!(check_incarnation("i", "i", "task t-0").is_ok());
        assert!(check_incarnation("", "i", "task t-0").is_ok());
        assert!(check_incarnation("i", "", "task t-0").is_ok());
    }

    #[test]
    fn only_a_lease_that_certainly_holds_lets_a_destructive_request_through() {
        assert!(lease_refusal(LeaseStanding::Held, "x").is_none());
        assert!(matches!(
            lease_refusal(LeaseStanding::MayHaveExpired, "x"),
            Some(HostError::LeaseMayHaveExpired {
                standing: "lease may have expired",
                ..
            })
        ));
        assert!(matches!(
            lease_refusal(LeaseStanding::Unregistered, "x"),
            Some(HostError::LeaseMayHaveExpired {
                standing: "not registered",
                ..
            })
        ));
    }

    #[test]
    fn a_stop_for_a_known_generation_gets_that_instance_even_when_already_stopped() {
        let s = slot(&[(1, true), (2, false)]);
        assert!(pick(&s, 1).unwrap(), "replays go to the stopped generation");
        assert!(!pick(&s, 2).unwrap());
    }

    #[test]
    fn a_stop_for_an_older_unknown_generation_is_stale() {
        let s = slot(&[(3, false)]);
        assert!(matches!(
            pick(&s, 2),
            Err(HostError::StaleGeneration { newest: 3, .. })
        ));
    }

    #[test]
    fn a_stop_for_a_newer_generation_with_the_running_incarnation_reaches_that_instance() {
        let s = slot(&[(3, false)]);
        assert!(!pick(&s, 4).unwrap());
        let all_stopped = slot(&[(3, true)]);
        assert!(matches!(
            pick(&all_stopped, 4),
            Err(HostError::NotHosted(_))
        ));
    }

    #[test]
    fn a_stop_for_a_generation_never_assigned_without_the_incarnation_is_refused() {
        let s = slot(&[(3, false)]);
        assert!(matches!(
            pick_named(&s, 1003, ""),
            Err(HostError::NeverAssigned {
                requested: 1003,
                newest: 3,
                ..
            })
        ));
    }

    #[test]
    fn a_stop_for_a_generation_never_assigned_with_another_incarnation_is_refused() {
        let s = slot(&[(3, false)]);
        assert!(matches!(
            pick_named(&s, 4, "inc-0"),
            Err(HostError::NeverAssigned { .. })
        ));
    }

    #[test]
    fn a_stop_for_an_assigned_generation_of_another_incarnation_is_refused() {
        let s = slot(&[(3, false)]);
        assert!(matches!(
            pick_named(&s, 3, "inc-0"),
            Err(HostError::StaleIncarnation { .. })
        ));
        assert!(!pick_named(&s, 3, "").unwrap(), "no incarnation: no check");
    }
}
