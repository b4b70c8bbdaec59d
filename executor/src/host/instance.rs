//! What connector instances and tasks share: their state, the stop that runs at most
//! once and is replayed to every later caller, the [`Instance`] trait that says where the
//! two kinds differ, and the one start path both take ([`start`]).

use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use wharf::ids::TaskKey;
use wharf::pb::v1 as pb;
use wharf::sdk::{ConfigDef, ConfigMap, Plugin};
use wharf::task::{TaskKind, spawn};

use super::plugin::CellStop;
use super::stop::{StopCause, StopOutcome, StopRecord, StopResult};
use super::{Assignment, Shared, lock, panic_text};
use crate::runtime::PluginSlot;

/// State of one instance on this executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceState {
    /// `start` is running.
    Starting,
    /// Started; the work loop runs (or, in cleanup-only mode, waits for the stop).
    Running,
    /// Started with target state PAUSED: no poll or put.
    Paused,
    /// Start or the work loop failed, or the stop failed or timed out; the text says why.
    Failed(String),
    /// The stop is under way.
    Stopping,
    /// Stopped without error.
    Stopped,
}

impl InstanceState {
    /// Wire state and error text.
    pub fn to_wire(&self) -> (pb::State, String) {
        match self {
            InstanceState::Starting => (pb::State::Unassigned, String::new()),
            InstanceState::Running | InstanceState::Stopping => (pb::State::Running, String::new()),
            InstanceState::Paused => (pb::State::Paused, String::new()),
            InstanceState::Failed(e) => (pb::State::Failed, e.clone()),
            InstanceState::Stopped => (pb::State::Stopped, String::new()),
        }
    }
}

/// State and stop bookkeeping of one instance.
pub(crate) struct Lifecycle {
    /// Generation of the assignment.
    pub generation: u64,
    /// Started for cleanup only.
    pub cleanup_only: bool,
    state: Mutex<InstanceState>,
    claimed: AtomicBool,
    /// Set when the stop overran its timeout: the instance was abandoned.
    abandoned: AtomicBool,
    done: Arc<watch::Sender<Option<StopRecord>>>,
    /// Values a plugin's error text must never carry out of the executor: what its
    /// config's references resolved to and its secret-typed values (set at start).
    hidden: std::sync::OnceLock<Vec<String>>,
}

impl Lifecycle {
    /// The lifecycle of a new instance for `assignment`, starting.
    pub fn new(assignment: &Assignment) -> Self {
        Self {
            generation: assignment.generation,
            cleanup_only: assignment.cleanup_only,
            state: Mutex::new(InstanceState::Starting),
            claimed: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            done: Arc::new(watch::channel(None).0),
            hidden: std::sync::OnceLock::new(),
        }
    }

    /// `text` (a plugin's error) with every value it must not show replaced
    /// ([`crate::providers::redact_values`]): applied wherever a plugin's error becomes a
    /// state, a status report or a log line.
    pub fn redact(&self, text: String) -> String {
        match self.hidden.get() {
            Some(hidden) if !hidden.is_empty() => crate::providers::redact_values(&text, hidden),
            Some(_) | None => text,
        }
    }

    pub fn state(&self) -> InstanceState {
        lock(&self.state).clone()
    }

    pub fn set_state(&self, state: InstanceState) {
        *lock(&self.state) = state;
    }

    /// Sets `state` unless a stop already began (a late work-loop failure must not hide
    /// the stop's own outcome).
    pub fn set_state_unless_stopping(&self, state: InstanceState) -> bool {
        if self.stop_claimed() {
            return false;
        }
        self.set_state(state);
        true
    }

    /// True once a stop was asked for.
    pub fn stop_claimed(&self) -> bool {
        self.claimed.load(Ordering::SeqCst)
    }

    /// Runs the stop made by `body` exactly once, in a spawned task (a cancelled request
    /// cannot cut it in half); every caller gets its record, later ones with
    /// `replayed = true`.
    pub async fn stop_once<F>(&self, body: impl FnOnce() -> F) -> StopResult
    where
        F: std::future::Future<Output = StopRecord> + Send + 'static,
    {
        let mut rx = self.done.subscribe();
        let replayed = self.claimed.swap(true, Ordering::SeqCst);
        if !replayed {
            self.set_state(InstanceState::Stopping);
            let tx = self.done.clone();
            // In the caller's span and trace (a StopTask call's): the plugin's stop span
            // is its child.
            let fut =
                wharf::trace::with_current_context(tracing::Instrument::in_current_span(body()));
            spawn(TaskKind::Awaited, "stop instance", async move {
                let record = fut.await;
                tx.send_replace(Some(record));
            });
        }
        let record = match rx.wait_for(Option::is_some).await {
            Ok(r) => r.clone(),
            Err(_) => None,
        };
        StopResult {
            record: record.unwrap_or_else(|| StopRecord {
                outcome: StopOutcome::Failed,
                connector_deleted: false,
                error: Some("the stop ended without a record".into()),
                generation: self.generation,
                elapsed: Duration::ZERO,
            }),
            replayed,
        }
    }

    /// True once the stop overran its timeout (the plugin call may still run).
    pub fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::SeqCst)
    }

    /// Records the final state of a stop.
    pub fn finish(&self, outcome: StopOutcome, error: &Option<String>) {
        if outcome == StopOutcome::TimedOut {
            self.abandoned.store(true, Ordering::SeqCst);
            crate::counters::abandoned();
        }
        self.set_state(match outcome {
            StopOutcome::Stopped => InstanceState::Stopped,
            StopOutcome::Failed | StopOutcome::TimedOut => {
                InstanceState::Failed(error.clone().unwrap_or_default())
            }
        });
    }
}

/// Which instance: for log lines, error texts and status reports.
#[derive(Debug, Clone, Copy)]
pub(crate) enum InstanceId<'a> {
    /// The connector instance of this connector.
    Connector(&'a str),
    /// This task.
    Task(&'a TaskKey),
}

impl InstanceId<'_> {
    /// `connector NAME` or `task NAME-N`, as errors and log lines name it.
    pub fn what(self) -> String {
        match self {
            InstanceId::Connector(name) => format!("connector {name}"),
            InstanceId::Task(key) => format!("task {key}"),
        }
    }

    /// Reports `state` of this instance's `generation` to the control plane.
    pub fn report(self, shared: &Shared, generation: u64, state: pb::State, error: String) {
        match self {
            InstanceId::Connector(name) => shared
                .registry
                .report_connector(name, generation, state, error),
            InstanceId::Task(key) => shared.registry.report_task(key, generation, state, error),
        }
    }
}

/// What a start request says that both kinds read the same way.
pub(crate) struct StartFacts<'a, K> {
    /// Where the instance is kept in the host.
    pub key: &'a K,
    /// Generation, target state, mode, incarnation, epoch.
    pub assignment: &'a Assignment,
    /// The config naming `connector.class`, and the request field it came in.
    pub config: (&'a ConfigMap, &'static str),
}

/// A hosted instance, connector or task: what the one start path ([`start`], `Host`'s
/// start) and the one stop path (`super::stop`) need of it. The two kinds differ only
/// here.
pub(crate) trait Instance: Send + Sync + Sized + 'static {
    /// Its start request (`StartConnector` or `StartTask`).
    type Start: Send + 'static;
    /// What the host keys its instances by (the connector's name or the task's key).
    type Key: Clone + Eq + Hash + Send + Sync + 'static;
    /// Name of the spawned start, for the task list.
    const START: &'static str;

    /// The fields of `req` every kind has.
    fn start_facts(req: &Self::Start) -> StartFacts<'_, Self::Key>;
    /// Which instance a request naming `key` addresses.
    fn id_of(key: &Self::Key) -> InstanceId<'_>;
    /// A new instance of `plugin` for `req`, on a slot of the plugin runtime.
    ///
    /// # Errors
    /// No plugin runtime could take it (text of the cause).
    fn new(plugin: &Plugin, req: &Self::Start, shared: Arc<Shared>) -> Result<Self, String>;

    /// Which instance it is.
    fn id(&self) -> InstanceId<'_>;
    /// Its state and stop bookkeeping.
    fn life(&self) -> &Lifecycle;
    /// Incarnation of the connector it runs for.
    fn incarnation(&self) -> &str;
    /// Where its plugin calls run.
    fn slot(&self) -> &PluginSlot;
    /// What the executor's instances share.
    fn shared(&self) -> &Shared;

    /// Replaces the config-provider references of `req`'s configs by their values
    /// (`crate::providers`), just before the plugin's start.
    ///
    /// # Errors
    /// The first reference that cannot be resolved, named with its key (no value).
    fn resolve_references(
        req: &mut Self::Start,
        providers: &crate::providers::ConfigProviders,
        hidden: &mut Vec<String>,
    ) -> Result<(), String>;
    /// The configs `req` hands the plugin (resolved once [`Instance::resolve_references`]
    /// ran): where its secret-typed values are.
    fn configs(req: &Self::Start) -> Vec<&ConfigMap>;

    /// Spawns the plugin's start for `req` on its slot.
    fn spawn_start(&self, req: &Self::Start) -> JoinHandle<Result<(), String>>;
    /// What follows a start that left the instance in `state` (a running task's work
    /// loop); nothing by default.
    fn after_start(_instance: &Arc<Self>, _state: &InstanceState, _req: &Self::Start) {}

    /// Begins the stop before the plugin's own: ends the instance's work, and returns
    /// the work the stop waits for (a task's work loop); nothing by default.
    fn begin_stop(&self, _cause: StopCause, _started: Instant) -> Option<JoinHandle<()>> {
        None
    }
    /// The stop side of its plugin cell, and what a stop waits for while a call of the
    /// plugin is in progress (`start or poll to return`).
    fn plugin_stop(&self) -> (&dyn CellStop, &'static str);
    /// The log consumer the runtime deletes after this instance's deletion-aware stop
    /// returned Ok (a sink connector's); none by default.
    fn consumer_deleted_with_it(&self) -> Option<String> {
        None
    }

    /// Keeps what a stop request names for its deletion's cleanup (a task's created
    /// topics), before the stop runs; nothing by default.
    fn note_stop_request(&self, _req: &super::StopRequest) {}

    /// What the runtime removes (or records as kept) for this instance after its
    /// deletion-aware stop returned Ok and its consumer was deleted: the ledger entries
    /// the runtime itself recorded. Nothing by default.
    fn runtime_cleanup(&self) -> futures::future::BoxFuture<'_, Result<(), String>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// True while abandoned: the stop timed out and the plugin's call has not returned.
    fn abandoned(&self) -> bool {
        self.life().abandoned() && !self.slot().exited()
    }
}

/// Reports `state` of `instance` to the control plane.
pub(crate) fn report_state<I: Instance>(instance: &I, state: &InstanceState) {
    let (state, error) = state.to_wire();
    instance
        .id()
        .report(instance.shared(), instance.life().generation, state, error);
}

/// The values of `configs` that `def` keeps secret (typed PASSWORD, marked secret or
/// named like a secret): what an error must not quote.
fn secret_values(def: &ConfigDef, configs: &[&ConfigMap]) -> Vec<String> {
    configs
        .iter()
        .flat_map(|config| {
            let redacted = def.redact(config);
            config
                .iter()
                .filter(move |(k, v)| redacted.get(*k).is_some_and(|r| r != *v))
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Runs the plugin's start once, then what follows for its kind ([`Instance::after_start`]):
/// the start's state, or the stop's when a stop began meanwhile. `def` is the plugin's
/// config definition (which keys are secret).
pub(crate) async fn start<I: Instance>(
    instance: Arc<I>,
    mut req: I::Start,
    def: &ConfigDef,
) -> InstanceState {
    let none = crate::providers::ConfigProviders::none();
    let providers = instance.shared().providers.get().unwrap_or(&none);
    let life = instance.life();
    let mut hidden = Vec::new();
    // An unresolvable reference fails the start before the plugin sees anything; the
    // plugin never starts, so a stop (true or false) has no plugin call to wait for.
    let result = match I::resolve_references(&mut req, providers, &mut hidden) {
        Ok(()) => {
            hidden.extend(secret_values(def, &I::configs(&req)));
            let _ = life.hidden.set(hidden);
            instance
                .spawn_start(&req)
                .await
                .unwrap_or_else(|e| Err(panic_text(e)))
        }
        Err(e) => {
            instance.plugin_stop().0.never_started();
            Err(e)
        }
    };
    let state = match result {
        Ok(()) if I::start_facts(&req).assignment.paused => InstanceState::Paused,
        Ok(()) => InstanceState::Running,
        // The plugin's text may quote what it was given: redacted before it is a state.
        Err(e) => InstanceState::Failed(life.redact(e)),
    };
    let (generation, cleanup_only) = (life.generation, life.cleanup_only);
    // A failed start needs the operator (a config to fix): WARN, with the reason.
    match (instance.id(), &state) {
        (InstanceId::Connector(name), InstanceState::Failed(error)) => {
            tracing::warn!(connector = %name,
            generation, cleanup_only, error = %error, "connector start failed")
        }
        (InstanceId::Task(key), InstanceState::Failed(error)) => {
            tracing::warn!(connector = %key.connector,
            task = key.task, generation, cleanup_only, error = %error, "task start failed")
        }
        (InstanceId::Connector(name), _) => tracing::info!(connector = %name, generation,
            cleanup_only, state = ?state, "connector started"),
        (InstanceId::Task(key), _) => tracing::info!(connector = %key.connector, task = key.task,
            generation, cleanup_only, state = ?state, "task started"),
    }
    if !life.set_state_unless_stopping(state.clone()) {
        return life.state();
    }
    report_state(&*instance, &state);
    I::after_start(&instance, &state, &req);
    state
}

#[cfg(test)]
mod tests {
    use wharf::sdk::{ConfigKey, ConfigType, Importance};

    use super::*;

    #[test]
    fn the_secret_values_are_those_of_password_marked_or_secret_looking_keys() {
        let def = ConfigDef::new()
            .define(ConfigKey::new(
                "db.pw",
                ConfigType::Password,
                Importance::High,
                "",
            ))
            .define(ConfigKey::new("host", ConfigType::String, Importance::High, "").secret())
            .define(ConfigKey::new(
                "topic",
                ConfigType::String,
                Importance::High,
                "",
            ));
        let connector: ConfigMap = [("db.pw", "p1"), ("topic", "t"), ("api.key", "k1")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let task: ConfigMap = [("host", "h1")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let mut got = secret_values(&def, &[&connector, &task]);
        got.sort();
        assert_eq!(got, ["h1", "k1", "p1"]);
    }
}
