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
//!
//! Connector instances and tasks take one start path ([`Host`]'s `start_instance`, then
//! `instance::start`) and one stop path (`stop::stop`, with its [`StopCause`]); they
//! differ only where the `instance::Instance` trait says. The files: `admission` (may a
//! stop run, and on which instance), `instance` (state, the trait, the start),
//! `plugin` (a plugin in its cell), `stop` (the stop and its report), `connector` and
//! `task` (the two kinds), `validate` (config checks), `error`.

mod admission;
mod connector;
mod error;
mod instance;
mod ledger;
mod plugin;
mod stop;
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
use crate::runtime::{PluginPool, PluginSlot};

pub use error::HostError;
pub use instance::InstanceState;
pub use stop::{StopCause, StopOutcome, StopRecord, StopResult};
pub use task::{
    ACTIVE_TOPIC_REPORT_INTERVAL, LOG_RETRY_BACKOFF_MS, OFFSET_COMMIT_INTERVAL_MS,
    OFFSET_COMMIT_RETRY_BACKOFF_MS, SINK_BATCH_MAX_RECORDS, SINK_FETCH_WAIT_MS,
    SINK_FLUSH_INTERVAL_MS, SINK_FLUSH_MAX_RECORDS, STOP_DRAIN_TIMEOUT_MS, TOPICS,
};

use admission::{StopAdmission, lease_refusal, listed, pick_for_stop, stop_admission};
use connector::ConnectorInstance;
use instance::Instance;
use task::TaskInstance;

/// Least time a connector instance gets for its stop when the tasks used up the shutdown
/// budget.
pub const MIN_STOP_TIMEOUT_MS: u64 = 100;

use wharf::sdk::CONNECTOR_CLASS;

/// What a start request says of the assignment, the same for connector instances and
/// tasks.
#[derive(Debug, Clone)]
pub struct Assignment {
    /// Assignment generation.
    pub generation: u64,
    /// True when the target state is PAUSED: started, but no poll or put.
    pub paused: bool,
    /// Start only for a following stop(true): no poll or put.
    pub cleanup_only: bool,
    /// The connector's incarnation id.
    pub incarnation: String,
    /// The epoch addressed; 0 skips the check.
    pub executor_epoch: u64,
}

/// A StartConnector request, validated.
#[derive(Debug, Clone)]
pub struct StartConnector {
    /// Connector name.
    pub connector: String,
    /// Full connector config.
    pub config: ConfigMap,
    /// Generation, target state, mode, incarnation, epoch.
    pub assignment: Assignment,
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
    /// Committed offsets, keyed by the canonical JSON text of the partition.
    pub offsets: BTreeMap<String, serde_json::Value>,
    /// Generation, target state, mode, incarnation, epoch.
    pub assignment: Assignment,
    /// The partitions a sink task reads; `None`: every partition, shared with the
    /// connector's other tasks on this executor.
    pub partition_share: Option<crate::log::PartitionShare>,
}

/// A StopTask or StopConnector request, validated.
#[derive(Debug, Clone)]
pub struct StopRequest {
    /// Why the control plane stops it: [`StopCause::Deleted`] or
    /// [`StopCause::Requested`] (the wire's `connector_deleted`, converted in `grpc.rs`).
    pub cause: StopCause,
    /// Generation of the assignment being stopped.
    pub generation: u64,
    /// Bound on the plugin's stop, in milliseconds; 0 means the default.
    pub timeout_ms: u32,
    /// Incarnation the stop was decided for; empty skips the check.
    pub incarnation: String,
    /// The epoch the stop was decided under; 0 skips the check.
    pub executor_epoch: u64,
    /// The deletion token the request carried (`wharf-deletion-token` metadata; empty
    /// when none): a stop with `connector_deleted = true` runs only with the one of this
    /// executor's registration ([`Host::admits_deletion`]).
    pub deletion_token: String,
    /// A task's deletion stop: the topics it created that the ledger still holds.
    pub created_topics: Vec<String>,
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
    /// The config providers that resolve references before a plugin's start; unset:
    /// none ([`Host::with_config_providers`]).
    pub providers: std::sync::OnceLock<crate::providers::ConfigProviders>,
    /// Custom transforms and predicates, beside the built-in ones (docs/pipeline.md).
    pub transforms: Vec<wharf::sdk::TransformPlugin>,
    /// The converters of a connector that names none (Connect's worker converters).
    pub converter_defaults: crate::pipeline::ConverterDefaults,
    /// The plugins run by plugin processes: their tasks get the executor's converter
    /// settings in their connector config (the JVM host converts records itself).
    pub process_plugins: std::collections::BTreeSet<String>,
}

impl Shared {
    /// A slot of the plugin runtime for a new instance.
    ///
    /// # Errors
    /// The runtime had to be written off and a fresh one could not be started (text of
    /// the cause).
    pub fn plugin_slot(&self) -> Result<PluginSlot, String> {
        self.pool
            .slot()
            .map_err(|e| format!("cannot start a fresh plugin runtime: {e}"))
    }
}

/// The connector instances and tasks of this executor.
pub struct Host {
    shared: Arc<Shared>,
    plugins: HashMap<String, Plugin>,
    default_stop_timeout: Duration,
    /// The plugin processes behind the out-of-process plugins among `plugins`.
    processes: Vec<Arc<crate::process::PluginProcess>>,
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
                providers: std::sync::OnceLock::new(),
                transforms: Vec::new(),
                converter_defaults: crate::pipeline::ConverterDefaults::default(),
                process_plugins: std::collections::BTreeSet::new(),
            }),
            plugins: plugins.into_iter().map(|p| (p.name.clone(), p)).collect(),
            default_stop_timeout,
            processes: Vec::new(),
            tasks: Mutex::new(HashMap::new()),
            connectors: Mutex::new(HashMap::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// This host with `providers` resolving the config-provider references of every
    /// instance it starts (`--config-providers`); without it, a reference fails the start.
    #[must_use]
    pub fn with_config_providers(self, providers: crate::providers::ConfigProviders) -> Self {
        // Set once, before the host is shared: the cell is empty here.
        let _ = self.shared.providers.set(providers);
        self
    }

    /// This host with custom transforms and predicates (before any instance starts).
    #[must_use]
    pub fn with_transforms(mut self, transforms: Vec<wharf::sdk::TransformPlugin>) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.transforms = transforms;
        }
        self
    }

    /// This host with the executor's default converters (before any instance starts).
    #[must_use]
    pub fn with_converter_defaults(mut self, defaults: crate::pipeline::ConverterDefaults) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.converter_defaults = defaults;
        }
        self
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
        let found = self.plugins.get(plugin)?;
        let def = wharf::sdk::runtime_config_def().merged(&found.config_def);
        let kind = found.kind();
        let custom = self.shared.transforms.clone();
        let converter_defaults = self.shared.converter_defaults.clone();
        let providers = self.shared.providers.get().cloned().unwrap_or_default();
        let own = config.clone();
        let log = self.shared.log.clone();
        let checked = tokio::task::spawn_blocking({
            let def = def.clone();
            move || {
                let mut errors = validate::key_errors(&def, &config);
                // Every sink reads topics, whatever its own definition says (a Java
                // connector's ConfigDef has no `topics`: Connect's runtime checks it).
                let topics_problem = match kind {
                    wharf::sdk::PluginKind::Sink => {
                        validate::sink_topics_problem(config.get(TOPICS).map(String::as_str))
                    }
                    wharf::sdk::PluginKind::Source => None,
                };
                if let Some(why) = topics_problem {
                    let blank = config.get(TOPICS).is_none_or(|t| t.trim().is_empty());
                    match errors.iter_mut().find(|(k, _)| k == TOPICS) {
                        // The plugin's definition refused the missing value already.
                        Some(_) if blank => {}
                        Some((_, messages)) => messages.push(why),
                        None => errors.push((TOPICS.to_owned(), vec![why])),
                    }
                }
                // What only the record log sees: Kafka client overrides under its
                // policy, topic names the brokers would refuse.
                for (key, why) in log.config_problems(&config) {
                    match errors.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, messages)) => messages.push(why),
                        None => errors.push((key, vec![why])),
                    }
                }
                // The record pipeline's keys (converters, transforms, predicates,
                // errors.*), each problem on its key.
                for (key, why) in
                    crate::pipeline::validate(&config, kind, &converter_defaults, &custom)
                {
                    match errors.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, messages)) => messages.push(why),
                        None => errors.push((key, vec![why])),
                    }
                }
                validate::with_references(errors, &config, |v| providers.check(v))
            }
        })
        .await
        .map_err(panic_text);
        // An out-of-process plugin's own checks (Kafka Connect's Connector#validate).
        let Some(process) = self.processes.iter().find(|p| p.offers(plugin)) else {
            return Some(checked);
        };
        Some(match checked {
            Ok(errors) => process
                .validate(plugin, own.clone())
                .await
                .map(|found| validate::merge_plugin_errors(&def, &own, errors, found)),
            Err(e) => Err(e),
        })
    }

    /// Adds the plugin processes whose plugins this host runs, so that their own config
    /// checks join `validate_config`.
    pub fn with_plugin_processes(
        mut self,
        processes: Vec<Arc<crate::process::PluginProcess>>,
    ) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.process_plugins = self
                .plugins
                .keys()
                .filter(|name| processes.iter().any(|p| p.offers(name)))
                .cloned()
                .collect();
        }
        self.processes = processes;
        self
    }

    /// The resources `plugin`'s connector declares it would provision with `config`
    /// ([`wharf::sdk::Connector::declared_resources`], on a fresh instance that is then
    /// dropped); `None` when the plugin is not installed, `Err` with the plugin's text
    /// (or its panic's).
    pub async fn declared_resources(
        &self,
        plugin: &str,
        config: ConfigMap,
    ) -> Option<Result<Vec<wharf::sdk::Resource>, String>> {
        let make = self.plugins.get(plugin)?.connector.clone();
        Some(
            tokio::task::spawn_blocking(move || {
                make()
                    .declared_resources(&config)
                    .map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(panic_text(e))),
        )
    }

    /// This executor's id.
    pub fn executor_id(&self) -> &str {
        &self.shared.executor_id
    }

    /// True when `token` is the deletion token of this executor's current registration,
    /// which a stop with `connector_deleted = true` must carry.
    pub fn admits_deletion(&self, token: &str) -> bool {
        self.shared.registry.admits_deletion(token)
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
        if !req.cause.connector_deleted() {
            return Ok(());
        }
        if let Some(e) = lease_refusal(self.shared.registry.lease_standing(), what) {
            self.shared.registry.beat_now();
            return Err(e);
        }
        // After the fencing checks, so that a stale stop is still refused as stale.
        if !self.admits_deletion(&req.deletion_token) {
            return Err(HostError::NotFromControlPlane {
                what: what.to_owned(),
            });
        }
        Ok(())
    }

    /// Admits a stop of the instance keyed `key` in `slots`. A stop whose generation's
    /// instance already had its stop claimed (completed, or still running) is answered
    /// from that stop's record first, before any epoch, lease or generation check: a
    /// retried stop (a lost answer, a control-plane failover, this executor fenced and
    /// registered again since) learns what happened and runs nothing (see
    /// [`stop_admission`]). Every other stop passes every check (epoch, lease,
    /// generation, incarnation), then gets the instance [`pick_for_stop`] chooses. A
    /// refusal is logged here, once, with what the request named: nothing ran for it.
    fn admit_stop<I: Instance>(
        &self,
        req: &StopRequest,
        what: &str,
        slots: &Mutex<HashMap<I::Key, Slot<I>>>,
        key: &I::Key,
    ) -> Result<Arc<I>, HostError> {
        let replay = {
            let map = lock(slots);
            map.get(key)
                .and_then(|slot| slot.instances.get(&req.generation))
                .filter(|i| {
                    stop_admission(req, Some(&***i as &dyn admission::StopFacts))
                        == StopAdmission::Replay
                })
                .cloned()
        };
        if let Some(instance) = replay {
            tracing::info!(
                what,
                generation = req.generation,
                executor_epoch = req.executor_epoch,
                cause = req.cause.as_str(),
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
                pick_for_stop(slot, req, what, |i: &I| {
                    (i.life().stop_claimed(), i.incarnation())
                })
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
                    executor_epoch = req.executor_epoch, cause = req.cause.as_str(),
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

    /// Starts an instance of the kind `I` in `slots` (or returns the state of the same
    /// generation already started): the one start path of tasks and connector
    /// instances. Older generations still running are stopped first
    /// ([`StopCause::Superseded`]); the start is spawned so that a cancelled request does
    /// not cut it in half.
    async fn start_instance<I: Instance>(
        &self,
        slots: &Mutex<HashMap<I::Key, Slot<I>>>,
        req: I::Start,
    ) -> Result<InstanceState, HostError> {
        let facts = I::start_facts(&req);
        let (key, generation) = (facts.key.clone(), facts.assignment.generation);
        let what = I::id_of(&key).what();
        self.check_epoch(facts.assignment.executor_epoch, &format!("start of {what}"))?;
        let plugin = self.plugin_for(facts.config.0, facts.config.1)?;
        let (instance, superseded) = {
            let mut slots = lock(slots);
            let slot = slots.entry(key).or_default();
            if generation < slot.newest {
                return Err(HostError::StaleGeneration {
                    what,
                    requested: generation,
                    newest: slot.newest,
                });
            }
            if let Some(existing) = slot.instances.get(&generation) {
                if existing.life().stop_claimed() {
                    return Err(HostError::GenerationStopped { what, generation });
                }
                return Ok(existing.life().state());
            }
            let superseded: Vec<_> = slot
                .instances
                .values()
                .filter(|i| !i.life().stop_claimed())
                .cloned()
                .collect();
            let instance = Arc::new(
                I::new(&plugin, &req, self.shared.clone())
                    .map_err(|reason| HostError::PluginRuntime { what, reason })?,
            );
            slot.newest = generation;
            slot.instances.insert(generation, instance.clone());
            (instance, superseded)
        };
        let timeout = self.default_stop_timeout;
        let handle = spawn(TaskKind::Awaited, I::START, async move {
            for old in superseded {
                stop::stop(&old, StopCause::Superseded, timeout).await;
            }
            instance::start(instance, req, &plugin.config_def).await
        });
        Ok(handle
            .await
            .unwrap_or_else(|e| InstanceState::Failed(panic_text(e))))
    }

    /// Stops the instance keyed `key` in `slots` as `req` says (its timeout 0: the
    /// default), once admitted: the one stop path of a control plane's request.
    async fn stop_instance<I: Instance>(
        &self,
        slots: &Mutex<HashMap<I::Key, Slot<I>>>,
        key: &I::Key,
        req: &StopRequest,
    ) -> Result<StopAnswer, HostError> {
        let what = I::id_of(key).what();
        let instance = self.admit_stop(req, &what, slots, key)?;
        instance.note_stop_request(req);
        let result = stop::stop(&instance, req.cause, self.stop_timeout(req.timeout_ms)).await;
        Ok(StopAnswer {
            result,
            abandoned: instance.abandoned(),
        })
    }

    /// Starts a task (or returns the state of the same generation already started).
    ///
    /// # Errors
    /// Epoch mismatch, stale or stopped generation, unknown plugin. A plugin failure is
    /// not an error: the state says FAILED.
    pub async fn start_task(&self, req: StartTask) -> Result<InstanceState, HostError> {
        self.start_instance(&self.tasks, req).await
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
        self.stop_instance(&self.tasks, task, req).await
    }

    /// Starts a connector instance (or returns the state of the same generation).
    ///
    /// # Errors
    /// As [`Host::start_task`].
    pub async fn start_connector(&self, req: StartConnector) -> Result<InstanceState, HostError> {
        self.start_instance(&self.connectors, req).await
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
        self.stop_instance(&self.connectors, &connector.to_owned(), req)
            .await
    }

    /// The record log and the consumer name the tasks of sink connector `connector` read
    /// through (KIP-875: a sink's offsets are that consumer's positions).
    pub fn sink_consumer(&self, connector: &str) -> (Arc<dyn RecordLog>, String) {
        let name = self.shared.log.sink_consumer_name(connector);
        (self.shared.log.clone(), name)
    }

    /// Whether a task of `connector` is hosted here and not yet stopped.
    pub fn runs_tasks_of(&self, connector: &str) -> bool {
        hosted(&self.tasks)
            .iter()
            .any(|t| t.key.connector == connector)
    }

    /// Connector instances and tasks not yet stopped (a stop under way included: the
    /// instance still holds what it holds until its stop returned or timed out), and those
    /// abandoned whose plugin call has not returned (`abandoned = true`).
    pub fn assignments(&self) -> (Vec<Hosted<String>>, Vec<Hosted<TaskKey>>) {
        (hosted(&self.connectors), hosted(&self.tasks))
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
                .filter(|i| !i.life().stop_claimed())
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

    /// Stops every instance for `cause`, a stop this executor decided ([`StopCause::Shutdown`]
    /// or [`StopCause::Fenced`]: `connector_deleted = false`): tasks first, then connector
    /// instances, in parallel, all within `timeout`.
    pub async fn stop_all(&self, cause: StopCause, timeout: Duration) {
        debug_assert!(cause.executor_decided(), "{cause:?} is the control plane's");
        let deadline = tokio::time::Instant::now() + timeout;
        let tasks = running(&self.tasks);
        join_all(tasks.iter().map(|t| stop::stop(t, cause, timeout))).await;
        let connectors = running(&self.connectors);
        let remaining = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .max(Duration::from_millis(MIN_STOP_TIMEOUT_MS));
        join_all(connectors.iter().map(|c| stop::stop(c, cause, remaining))).await;
    }
}

/// The instances in `slots` whose stop was not claimed yet.
fn running<I: Instance>(slots: &Mutex<HashMap<I::Key, Slot<I>>>) -> Vec<Arc<I>> {
    lock(slots)
        .values()
        .flat_map(|s| s.instances.values().cloned())
        .filter(|i| !i.life().stop_claimed())
        .collect()
}

/// The instances in `slots` that [`Host::assignments`] lists ([`listed`]).
fn hosted<I: Instance>(slots: &Mutex<HashMap<I::Key, Slot<I>>>) -> Vec<Hosted<I::Key>> {
    lock(slots)
        .iter()
        .flat_map(|(key, slot)| {
            slot.instances
                .values()
                .map(move |i| (key.clone(), i.clone()))
        })
        .filter(|(_, i)| listed(i.life().stop_claimed(), &i.life().state(), i.abandoned()))
        .map(|(key, i)| Hosted {
            key,
            generation: i.life().generation,
            state: i.life().state(),
            cleanup_only: i.life().cleanup_only,
            abandoned: i.abandoned(),
            incarnation: i.incarnation().to_owned(),
        })
        .collect()
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
