//! `wharf-testkit`: a conformance kit that drives a connector plugin through the
//! lifecycle contract of KIP-883/KIP-901 (docs/contract.md) against the author's real
//! external system, the way an executor does (tasks stopped before the connector
//! instance, a stop only after its start returned).
//!
//! The author supplies the [`Plugin`], a config per connector name and a [`Probe`] that
//! lists the external resources a connector owns (and those the user made). Each rule
//! is one method of [`Kit`] returning `Result<(), CheckFailed>`, so that every rule is
//! its own ordinary test:
//!
//! ```no_run
//! # async fn demo(kit: wharf_testkit::Kit<impl wharf_testkit::Probe>) {
//! // #[tokio::test] async fn plain_stops_keep_resources() {
//!     kit.plain_stops_keep_resources().await.unwrap();
//! // }
//! # }
//! ```
//!
//! Every check uses fresh connector names (`<prefix>-<check>-a`, `-b`), and leaves
//! nothing behind when the plugin is right. Connectors run as [`FIRST_INCARNATION`];
//! the two checks on ownership ([`Kit::late_cleanup_leaves_a_re_created_connector`],
//! [`Kit::start_refuses_what_another_incarnation_kept`]) also create one again under the
//! same name as [`SECOND_INCARNATION`].

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use wharf::sdk::{
    ConfigMap, Connector, ConnectorContext, Plugin, PluginKind, PluginResult, SinkRecord, SinkTask,
    SourceTask, TaskContext, TaskFactory,
};

/// Default bound on a plugin call other than a stop (`start`, `task_configs`, `put`,
/// `flush`), in seconds; [`Kit::call_timeout`] sets another.
pub const CALL_TIMEOUT_SECS: u64 = 30;

/// Default bound on a plain `stop_with(false)`, in milliseconds: the executor's default
/// graceful stop timeout (`--graceful-timeout-ms`, `DEFAULT_GRACEFUL_TIMEOUT_MS` in
/// `executor/src/app.rs`), after which it abandons the instance on a restart, a pause, a
/// reconfiguration or a shutdown. A copy, not a dependency: the kit does not link the
/// executor (and its record log and built-in connectors); the example crate's tests
/// assert that the two agree. [`Kit::stop_timeout`] sets another.
pub const STOP_TIMEOUT_MS: u64 = 10_000;

/// Default bound on a `stop_with(true)`, in milliseconds: the runtime's default
/// `cleanup.timeout.ms` ([`wharf::sdk::DEFAULT_CLEANUP_TIMEOUT_MS`]), after which the
/// attempt counts as failed and the instance is abandoned. [`Kit::cleanup_timeout`] sets
/// another (a connector may set `cleanup.timeout.ms` up to 24 h).
pub const CLEANUP_TIMEOUT_MS: u64 = wharf::sdk::DEFAULT_CLEANUP_TIMEOUT_MS as u64;

/// Worker threads of the kit's plugin runtime. A call that blocks its thread holds one
/// until it returns; the kit's own timer runs elsewhere, so it still fires.
const PLUGIN_WORKERS: usize = 4;

/// Name of the kit's plugin runtime threads (shown in a plugin's panic message).
pub const PLUGIN_THREAD_NAME: &str = "wharf-testkit-plugin";

/// Incarnation id of the first connector of a name in every check.
pub const FIRST_INCARNATION: &str = "incarnation-1";

/// Incarnation id of the connector created again under the same name after the first
/// one was deleted (a new incarnation, docs/lifecycle.md "Deletion").
pub const SECOND_INCARNATION: &str = "incarnation-2";

/// Executor id the kit's contexts carry.
pub const KIT_EXECUTOR_ID: &str = "wharf-testkit";

/// What the author's external system holds, as the kit needs to see it. Resource names
/// are any stable text (`table public.audit_x`, `queue q1`); the kit only compares sets.
#[async_trait]
pub trait Probe: Send + Sync {
    /// The resources connector `connector` (configured with `config`) owns right now.
    ///
    /// # Errors
    /// Text saying why the system could not be read; the check fails with it.
    async fn owned(&self, connector: &str, config: &ConfigMap) -> Result<BTreeSet<String>, String>;

    /// The resources the user made that the connector uses but MUST never remove (the
    /// watched tables of an audit source, a pre-declared queue). Empty by default.
    ///
    /// # Errors
    /// As [`Probe::owned`].
    async fn pre_existing(&self, config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        let _ = config;
        Ok(BTreeSet::new())
    }

    /// Removes one owned resource behind the plugin's back, to leave the state of a
    /// start that failed halfway. `Ok(false)` when the probe cannot (the half-start check
    /// then only runs the cleanup on the full set).
    ///
    /// # Errors
    /// As [`Probe::owned`].
    async fn remove(&self, resource: &str) -> Result<bool, String> {
        let _ = resource;
        Ok(false)
    }

    /// For a sink plugin: the record values the external system holds for connector
    /// `connector` right now (a queue's messages, a table's rows), in any order, each as
    /// often as it is there. `Ok(None)` (the default) when the probe cannot read them;
    /// [`Kit::sink_acknowledges_only_flushed_records`] then fails and says so.
    ///
    /// # Errors
    /// As [`Probe::owned`].
    async fn delivered(
        &self,
        connector: &str,
        config: &ConfigMap,
    ) -> Result<Option<Vec<Vec<u8>>>, String> {
        let _ = (connector, config);
        Ok(None)
    }
}

/// Records each sink task gets in [`Kit::sink_acknowledges_only_flushed_records`].
pub const RECORDS_PER_TASK: u64 = 20;

/// A check that did not hold: which one, and what was seen.
#[derive(thiserror::Error)]
#[error("[{check}] {message}")]
pub struct CheckFailed {
    /// The check's name (its method name).
    pub check: &'static str,
    /// What went wrong, with what was expected and seen.
    pub message: String,
    /// True when the check could not check anything because the probe lacks what it
    /// needs (no `Probe::pre_existing` resource, a `Probe::remove` that removes nothing):
    /// the message says what to implement. Called alone, such a check fails; [`Kit::all`]
    /// reports it as skipped in its [`Report`].
    pub checked_nothing: bool,
}

/// A check [`Kit::all`] skipped because it could not check anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The check's name.
    pub check: &'static str,
    /// Why, and what to implement in the probe for it to check something.
    pub reason: String,
}

/// What [`Kit::all`] ran: the checks that passed and those skipped, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Checks that passed.
    pub passed: Vec<&'static str>,
    /// Checks that checked nothing (see [`CheckFailed::checked_nothing`]).
    pub skipped: Vec<Skipped>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} checks passed", self.passed.len())?;
        if self.skipped.is_empty() {
            return Ok(());
        }
        write!(f, ", {} skipped:", self.skipped.len())?;
        for s in &self.skipped {
            write!(f, "\n  [{}] {}", s.check, s.reason)?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for CheckFailed {
    // `unwrap()` in a test prints Debug: make it the readable message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Result of one check.
pub type CheckResult = Result<(), CheckFailed>;

/// A config for each connector name (names differ per check, so configured resource
/// names can follow them).
pub type ConfigFor = Arc<dyn Fn(&str) -> ConfigMap + Send + Sync>;

/// How long each kind of plugin call may take before the check fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `start`, `task_configs`, `put`, `flush` (default [`CALL_TIMEOUT_SECS`]).
    pub call: Duration,
    /// `stop_with(false)` (default [`STOP_TIMEOUT_MS`]).
    pub stop: Duration,
    /// `stop_with(true)` (default [`CLEANUP_TIMEOUT_MS`]).
    pub cleanup: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            call: Duration::from_secs(CALL_TIMEOUT_SECS),
            stop: Duration::from_millis(STOP_TIMEOUT_MS),
            cleanup: Duration::from_millis(CLEANUP_TIMEOUT_MS),
        }
    }
}

/// A plugin call, as far as its bound goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallKind {
    /// `start`, `task_configs`, `put`, `flush`.
    Other,
    /// `stop_with(connector_deleted)`.
    Stop { deleted: bool },
}

/// The bound on a call of `kind` under `bounds`, and which runtime setting it stands for
/// (the text a failure shows). Pure.
fn bound_of(kind: CallKind, bounds: &Bounds) -> (Duration, &'static str) {
    match kind {
        CallKind::Other => (
            bounds.call,
            "the kit's bound on a plugin call (Kit::call_timeout)",
        ),
        CallKind::Stop { deleted: false } => (
            bounds.stop,
            "the executor's graceful stop timeout (--graceful-timeout-ms, default 10000): past it the executor abandons the instance; Kit::stop_timeout sets another bound for a plugin that documents one",
        ),
        CallKind::Stop { deleted: true } => (
            bounds.cleanup,
            "the connector's cleanup.timeout.ms (default 30000): past it the cleanup attempt counts as failed and the instance is abandoned; Kit::cleanup_timeout sets another bound for a plugin that documents one",
        ),
    }
}

/// Why a check failed when call `what` overran `bound` (`setting`: what the bound stands
/// for). Pure.
fn overrun_text(what: &str, bound: Duration, setting: &str) -> String {
    format!(
        "{what} did not return within {} ms, {setting}; a call that blocks its thread (std::thread::sleep, synchronous I/O) must move that work to tokio::task::spawn_blocking",
        bound.as_millis()
    )
}

/// The kit's own multi-thread runtime where every plugin call runs, so that a call that
/// blocks its thread cannot stop the timer of the check (which runs on the caller's
/// runtime, often a current-thread one), as the executor runs plugin calls on a plugin
/// runtime apart from its own work. Started at the first call; shut down without waiting
/// when the kit is dropped (a blocked call may still hold a worker).
#[derive(Default)]
struct PluginRuntime(std::sync::OnceLock<Result<tokio::runtime::Runtime, String>>);

impl PluginRuntime {
    fn handle(&self) -> Result<&tokio::runtime::Handle, String> {
        self.0
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(PLUGIN_WORKERS)
                    .thread_name(PLUGIN_THREAD_NAME)
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map(tokio::runtime::Runtime::handle)
            .map_err(Clone::clone)
    }
}

impl Drop for PluginRuntime {
    fn drop(&mut self) {
        // Never a blocking drop: it would wait for a plugin call stuck in its thread, and
        // dropping a runtime inside the caller's async test panics.
        if let Some(Ok(rt)) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The kit for one plugin.
pub struct Kit<P> {
    plugin: Plugin,
    config_for: ConfigFor,
    probe: P,
    tasks_max: u32,
    prefix: String,
    bounds: Bounds,
    cleanup_attempts: u32,
    runtime: PluginRuntime,
    /// The task configs each connector incarnation (name, incarnation) last produced, as
    /// its deletion record keeps them.
    last_task_configs: std::sync::Mutex<BTreeMap<(String, String), Vec<ConfigMap>>>,
}

/// A plugin instance shared with the call running on the plugin runtime. A call that
/// overran keeps it locked, so nothing calls that instance again (as the executor never
/// calls an abandoned one).
type Shared<T> = Arc<tokio::sync::Mutex<T>>;

fn shared<T>(value: T) -> Shared<T> {
    Arc::new(tokio::sync::Mutex::new(value))
}

enum Task {
    Source(Box<dyn SourceTask>),
    Sink(Box<dyn SinkTask>),
}

impl Task {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        match self {
            Task::Source(t) => t.start(ctx, config).await,
            Task::Sink(t) => t.start(ctx, config).await,
        }
    }

    async fn stop_with(&mut self, deleted: bool) -> PluginResult<()> {
        match self {
            Task::Source(t) => t.stop_with(deleted).await,
            Task::Sink(t) => t.stop_with(deleted).await,
        }
    }

    /// `put` of a sink task (the kit calls it only on one).
    async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()> {
        match self {
            Task::Sink(t) => t.put(records).await,
            Task::Source(_) => Err("put called on a source task".into()),
        }
    }

    /// `flush` of a sink task (the kit calls it only on one).
    async fn flush(&mut self, offsets: &BTreeMap<String, u64>) -> PluginResult<()> {
        match self {
            Task::Sink(t) => t.flush(offsets).await,
            Task::Source(_) => Err("flush called on a source task".into()),
        }
    }
}

/// A started connector instance with its tasks, as one executor would host them.
struct Running {
    name: String,
    /// The incarnation it was started as (empty until then).
    incarnation: String,
    config: ConfigMap,
    connector: Shared<Box<dyn Connector>>,
    tasks: Vec<Shared<Task>>,
}

impl<P: Probe> Kit<P> {
    /// A kit for `plugin`, configuring connector `name` with `config_for(name)` (without
    /// `connector.class` and `tasks.max`: the kit adds them), inspecting the external
    /// system with `probe`.
    pub fn new(
        plugin: Plugin,
        config_for: impl Fn(&str) -> ConfigMap + Send + Sync + 'static,
        probe: P,
    ) -> Self {
        Self {
            prefix: format!("kit-{}", plugin.name),
            plugin,
            config_for: Arc::new(config_for),
            probe,
            tasks_max: 2,
            bounds: Bounds::default(),
            cleanup_attempts: wharf::sdk::DEFAULT_CLEANUP_MAX_ATTEMPTS,
            runtime: PluginRuntime::default(),
            last_task_configs: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// Tasks to run (default 2; the lower-`tasks.max` check runs one fewer).
    pub fn tasks_max(mut self, n: u32) -> Self {
        self.tasks_max = n.max(1);
        self
    }

    /// Prefix of the connector names the checks use (default `kit-<plugin>`); set it
    /// when several test binaries share one external system.
    pub fn name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Bound on `start`, `task_configs`, `put` and `flush` (default [`CALL_TIMEOUT_SECS`]).
    pub fn call_timeout(mut self, bound: Duration) -> Self {
        self.bounds.call = bound;
        self
    }

    /// Bound on a plain `stop_with(false)` (default [`STOP_TIMEOUT_MS`], the executor's
    /// default `--graceful-timeout-ms`). Raise it only for a plugin whose documentation
    /// tells operators to raise `--graceful-timeout-ms` as much.
    pub fn stop_timeout(mut self, bound: Duration) -> Self {
        self.bounds.stop = bound;
        self
    }

    /// Bound on a `stop_with(true)` (default [`CLEANUP_TIMEOUT_MS`], the default
    /// `cleanup.timeout.ms`). Raise it only for a plugin whose documentation tells
    /// operators to set `cleanup.timeout.ms` as high.
    pub fn cleanup_timeout(mut self, bound: Duration) -> Self {
        self.bounds.cleanup = bound;
        self
    }

    /// Attempts of each cleanup step (one task's or the connector instance's
    /// `stop_with(true)`) before the check fails; default
    /// [`wharf::sdk::DEFAULT_CLEANUP_MAX_ATTEMPTS`] (5), the runtime's default
    /// `cleanup.max.attempts`. The first attempt is the stop of the instance; each later
    /// one, after the runtime's backoff ([`retry_backoff`]), starts a fresh cleanup-only
    /// instance and stops it with `true`, as the runtime's deletion does. A plugin error
    /// or panic is retried; an overrun fails the check at once. `1` asks that every
    /// cleanup succeed at the first try.
    pub fn cleanup_attempts(mut self, attempts: u32) -> Self {
        self.cleanup_attempts = attempts.max(1);
        self
    }

    /// The bounds in force.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    fn name(&self, check: &str, which: &str) -> String {
        format!("{}-{check}-{which}", self.prefix)
    }

    fn config(&self, name: &str, tasks_max: u32) -> ConfigMap {
        let mut c = (self.config_for)(name);
        c.insert("connector.class".to_owned(), self.plugin.name.clone());
        c.insert("tasks.max".to_owned(), tasks_max.to_string());
        c
    }

    fn new_task(&self) -> Task {
        match &self.plugin.task {
            TaskFactory::Source(f) => Task::Source(f()),
            TaskFactory::Sink(f) => Task::Sink(f()),
        }
    }

    /// Runs one plugin call like [`Kit::call_raw`]; a plugin error fails the check too.
    async fn call<T: Send + 'static>(
        &self,
        check: &'static str,
        what: String,
        kind: CallKind,
        fut: impl Future<Output = PluginResult<T>> + Send + 'static,
    ) -> Result<T, CheckFailed> {
        match self.call_raw(check, &what, kind, fut).await? {
            Ok(v) => Ok(v),
            Err(e) => Err(fail(check, format!("{what} failed: {e}"))),
        }
    }

    /// Runs one plugin call on the kit's plugin runtime under the bound of `kind`
    /// ([`Bounds`]): `Err` when it overran (the call is cancelled at its next await; one
    /// that blocks goes on in its thread, abandoned) or did not complete, else the
    /// plugin's own answer, a panic being an error `plugin panicked: <message>` (the
    /// executor's text for it).
    async fn call_raw<T: Send + 'static>(
        &self,
        check: &'static str,
        what: &str,
        kind: CallKind,
        fut: impl Future<Output = PluginResult<T>> + Send + 'static,
    ) -> Result<PluginResult<T>, CheckFailed> {
        let runtime = self.runtime.handle().map_err(|e| {
            fail(
                check,
                format!("the kit could not start its plugin runtime for {what}: {e}"),
            )
        })?;
        let handle = runtime.spawn(fut);
        let abort = handle.abort_handle();
        let (bound, setting) = bound_of(kind, &self.bounds);
        match tokio::time::timeout(bound, handle).await {
            Ok(Ok(answer)) => Ok(answer),
            // A panic is the plugin's failure, reported as the executor reports it.
            Ok(Err(e)) if e.is_panic() => Ok(Err(panic_text(e.into_panic().as_ref()).into())),
            Ok(Err(e)) => Err(fail(check, format!("{what} did not complete: {e}"))),
            Err(_) => {
                abort.abort();
                Err(fail(check, overrun_text(what, bound, setting)))
            }
        }
    }

    /// Starts the connector instance and its tasks as incarnation `incarnation` (all
    /// the tasks it asks for; a cleanup-only host gets the last task configs).
    async fn start(
        &self,
        check: &'static str,
        name: &str,
        incarnation: &str,
        tasks_max: u32,
        cleanup_only: bool,
    ) -> Result<Running, CheckFailed> {
        let mut r = self.instance(name, tasks_max);
        match self
            .start_into(check, &mut r, incarnation, tasks_max, cleanup_only)
            .await?
        {
            None => Ok(r),
            Some(refused) => Err(fail(check, refused)),
        }
    }

    /// A connector instance of `name` not started yet, with no tasks.
    fn instance(&self, name: &str, tasks_max: u32) -> Running {
        Running {
            name: name.to_owned(),
            incarnation: String::new(),
            config: self.config(name, tasks_max),
            connector: shared((self.plugin.connector)()),
            tasks: Vec::new(),
        }
    }

    /// Starts `r`'s connector instance, then one task per task config, each pushed
    /// onto `r.tasks` before its start (an instance whose start failed exists and is
    /// stopped too, docs/contract.md rule 13). `Ok(Some(text))`: a plugin call
    /// returned an error (`text` names the call and the error) and nothing after it
    /// ran; `Err`: a call overran its timeout or the kit itself failed.
    async fn start_into(
        &self,
        check: &'static str,
        r: &mut Running,
        incarnation: &str,
        tasks_max: u32,
        cleanup_only: bool,
    ) -> Result<Option<String>, CheckFailed> {
        let name = r.name.clone();
        let config = r.config.clone();
        r.incarnation = incarnation.to_owned();
        let ctx = ConnectorContext::new(
            &name,
            incarnation,
            cleanup_only,
            KIT_EXECUTOR_ID,
            Arc::new(|| {}),
        );
        let what = format!("connector {name} start ({incarnation}, cleanup_only={cleanup_only})");
        let connector = r.connector.clone();
        let start_config = config.clone();
        let started = self
            .call_raw(check, &what, CallKind::Other, async move {
                connector.lock().await.start(ctx, start_config).await
            })
            .await?;
        if let Err(e) = started {
            return Ok(Some(format!("{what} failed: {e}")));
        }
        let task_configs = if cleanup_only {
            // A cleanup-only host gets the task configs the deletion record kept: the
            // last ones this incarnation produced (none when it never started).
            self.last_task_configs
                .lock()
                .map_err(|_| fail(check, "task config memo poisoned".to_owned()))?
                .get(&(name.clone(), incarnation.to_owned()))
                .cloned()
                .unwrap_or_default()
        } else {
            let what = format!("connector {name} task_configs({tasks_max})");
            let connector = r.connector.clone();
            let asked = self
                .call_raw(check, &what, CallKind::Other, async move {
                    connector.lock().await.task_configs(tasks_max).await
                })
                .await?;
            let t = match asked {
                Ok(t) => t,
                Err(e) => return Ok(Some(format!("{what} failed: {e}"))),
            };
            self.last_task_configs
                .lock()
                .map_err(|_| fail(check, "task config memo poisoned".to_owned()))?
                .insert((name.clone(), incarnation.to_owned()), t.clone());
            t
        };
        for (i, tc) in task_configs.into_iter().enumerate() {
            let ctx = task_context(r, i, cleanup_only);
            let task = shared(self.new_task());
            let what = format!("task {name}/{i} start ({incarnation})");
            let t = task.clone();
            let started = self
                .call_raw(check, &what, CallKind::Other, async move {
                    t.lock().await.start(ctx, tc).await
                })
                .await?;
            r.tasks.push(task);
            if let Err(e) = started {
                return Ok(Some(format!("{what} failed: {e}")));
            }
        }
        Ok(None)
    }

    /// Stops every task, then the connector instance, with `deleted`. A failed
    /// `stop_with(true)` is retried on fresh cleanup-only instances, up to
    /// [`Kit::cleanup_attempts`] in all ([`Kit::cleanup_unit`]).
    async fn stop(&self, check: &'static str, r: &mut Running, deleted: bool) -> CheckResult {
        for (i, t) in r.tasks.iter().enumerate() {
            let what = format!("task {}/{i} stop({deleted})", r.name);
            let t = t.clone();
            let first = self
                .call_raw(check, &what, CallKind::Stop { deleted }, async move {
                    t.lock().await.stop_with(deleted).await
                })
                .await?;
            self.cleanup_unit(check, r, Unit::Task(i), &what, deleted, first)
                .await?;
        }
        let what = format!("connector {} stop({deleted})", r.name);
        let c = r.connector.clone();
        let first = self
            .call_raw(check, &what, CallKind::Stop { deleted }, async move {
                c.lock().await.stop_with(deleted).await
            })
            .await?;
        self.cleanup_unit(check, r, Unit::Connector, &what, deleted, first)
            .await
    }

    /// Given the outcome `first` of `what` (the stop of `unit` of `r`): done when it
    /// succeeded; for a failed `stop(true)`, attempts again on fresh cleanup-only
    /// instances of `unit` until one succeeds or [`Kit::cleanup_attempts`] ran out.
    async fn cleanup_unit(
        &self,
        check: &'static str,
        r: &Running,
        unit: Unit,
        what: &str,
        deleted: bool,
        first: PluginResult<()>,
    ) -> CheckResult {
        let mut outcome = first;
        let mut attempts = 1;
        while let Err(e) = outcome {
            if !deleted || attempts >= self.cleanup_attempts {
                return Err(fail(
                    check,
                    cleanup_failed_text(what, &e, attempts, deleted),
                ));
            }
            // The runtime's backoff: a transient failure may need the time it gets there.
            tokio::time::sleep(retry_backoff(attempts)).await;
            attempts += 1;
            outcome = self.cleanup_on_fresh(check, r, unit).await?;
        }
        Ok(())
    }

    /// One retried cleanup of `unit` of `r`: a fresh cleanup-only instance (a task gets
    /// the task config its incarnation last produced) is started, then stopped with
    /// `true`. `Ok(Err)`: its start or its stop failed; `Err`: a call overran.
    async fn cleanup_on_fresh(
        &self,
        check: &'static str,
        r: &Running,
        unit: Unit,
    ) -> Result<PluginResult<()>, CheckFailed> {
        let (name, incarnation) = (&r.name, &r.incarnation);
        let retry = "retried on a fresh cleanup-only instance";
        match unit {
            Unit::Task(i) => {
                let config = self
                    .last_task_configs
                    .lock()
                    .map_err(|_| fail(check, "task config memo poisoned".to_owned()))?
                    .get(&(name.clone(), incarnation.clone()))
                    .and_then(|configs| configs.get(i).cloned())
                    .unwrap_or_default();
                let ctx = task_context(r, i, true);
                let task = shared(self.new_task());
                let what =
                    format!("task {name}/{i} start ({incarnation}, cleanup_only=true, {retry})");
                let t = task.clone();
                let started = self
                    .call_raw(check, &what, CallKind::Other, async move {
                        t.lock().await.start(ctx, config).await
                    })
                    .await?;
                if let Err(e) = started {
                    return Ok(Err(format!("{what} failed: {e}").into()));
                }
                let what = format!("task {name}/{i} stop(true) ({retry})");
                self.call_raw(check, &what, CallKind::Stop { deleted: true }, async move {
                    task.lock().await.stop_with(true).await
                })
                .await
            }
            Unit::Connector => {
                let ctx = ConnectorContext::new(
                    name,
                    incarnation,
                    true,
                    KIT_EXECUTOR_ID,
                    Arc::new(|| {}),
                );
                let connector = shared((self.plugin.connector)());
                let what =
                    format!("connector {name} start ({incarnation}, cleanup_only=true, {retry})");
                let (c, config) = (connector.clone(), r.config.clone());
                let started = self
                    .call_raw(check, &what, CallKind::Other, async move {
                        c.lock().await.start(ctx, config).await
                    })
                    .await?;
                if let Err(e) = started {
                    return Ok(Err(format!("{what} failed: {e}").into()));
                }
                let what = format!("connector {name} stop(true) ({retry})");
                self.call_raw(check, &what, CallKind::Stop { deleted: true }, async move {
                    connector.lock().await.stop_with(true).await
                })
                .await
            }
        }
    }

    /// `stop_with(deleted)` on one task, under the bound of that stop.
    async fn stop_task(
        &self,
        check: &'static str,
        what: String,
        task: &Shared<Task>,
        deleted: bool,
    ) -> CheckResult {
        let t = task.clone();
        self.call(check, what, CallKind::Stop { deleted }, async move {
            t.lock().await.stop_with(deleted).await
        })
        .await
    }

    /// `stop_with(deleted)` on a connector instance, under the bound of that stop.
    async fn stop_connector(
        &self,
        check: &'static str,
        what: String,
        connector: &Shared<Box<dyn Connector>>,
        deleted: bool,
    ) -> CheckResult {
        let c = connector.clone();
        self.call(check, what, CallKind::Stop { deleted }, async move {
            c.lock().await.stop_with(deleted).await
        })
        .await
    }

    async fn owned(
        &self,
        check: &'static str,
        r: &Running,
    ) -> Result<BTreeSet<String>, CheckFailed> {
        self.probe.owned(&r.name, &r.config).await.map_err(|e| {
            fail(
                check,
                format!("probe could not list what {} owns: {e}", r.name),
            )
        })
    }

    async fn pre_existing(
        &self,
        check: &'static str,
        name: &str,
    ) -> Result<BTreeSet<String>, CheckFailed> {
        self.probe
            .pre_existing(&self.config(name, self.tasks_max))
            .await
            .map_err(|e| {
                fail(
                    check,
                    format!("probe could not list the pre-existing resources: {e}"),
                )
            })
    }

    /// Starts `name` and returns it with what it owns; fails when it owns nothing (the
    /// other checks would then prove nothing).
    async fn provisioned(
        &self,
        check: &'static str,
        name: &str,
        tasks_max: u32,
    ) -> Result<(Running, BTreeSet<String>), CheckFailed> {
        let r = self
            .start(check, name, FIRST_INCARNATION, tasks_max, false)
            .await?;
        let owned = self.owned(check, &r).await?;
        if owned.is_empty() {
            return Err(fail(
                check,
                format!("after start the probe lists nothing that {name} owns: check the probe"),
            ));
        }
        Ok((r, owned))
    }

    async fn expect_kept(
        &self,
        check: &'static str,
        after: &str,
        r: &Running,
        before: &BTreeSet<String>,
    ) -> CheckResult {
        let gone = self.gone(check, r, before).await?;
        if gone.is_empty() {
            Ok(())
        } else {
            Err(fail(
                check,
                format!(
                    "{after} removed {gone:?}: only a deletion (stop(true)) may remove resources"
                ),
            ))
        }
    }

    /// What of `before` the probe no longer lists for `r`.
    async fn gone(
        &self,
        check: &'static str,
        r: &Running,
        before: &BTreeSet<String>,
    ) -> Result<Vec<String>, CheckFailed> {
        let now = self.owned(check, r).await?;
        Ok(before.difference(&now).cloned().collect())
    }

    async fn expect_empty(&self, check: &'static str, after: &str, r: &Running) -> CheckResult {
        let left = self.owned(check, r).await?;
        if left.is_empty() {
            Ok(())
        } else {
            Err(fail(check, format!("{after} left {left:?} behind")))
        }
    }

    /// Deletes `r` (tasks then connector, stop(true)) and checks nothing it owned is
    /// left.
    async fn delete(&self, check: &'static str, r: &mut Running) -> CheckResult {
        self.stop(check, r, true).await?;
        self.expect_empty(
            check,
            "the deletion (stop(true) on every task, then the connector)",
            r,
        )
        .await
    }

    /// [`Kit::delete`] as the tidy-up at the end of a check about something else: a
    /// failure says it is the cleanup that failed, and which check is about it, so that a
    /// cleanup bug does not read as a bug of the rule the check is named after.
    async fn delete_at_end(&self, check: &'static str, r: &mut Running) -> CheckResult {
        self.delete(check, r).await.map_err(|e| {
            fail(
                check,
                format!(
                    "the deletion at the end of this check failed: {}; that is a cleanup failure, not one of this check's rule: see check {CLEANUP_CHECK} (Kit::all runs the cleanup checks first)",
                    e.message
                ),
            )
        })
    }

    /// Start then `stop(false)`, a restart (fresh instances of the same incarnation), a
    /// reconfiguration (the connector recomputes task configs and the tasks restart)
    /// and a pause/STOPPED (`stop(false)` on everything): nothing the probe lists
    /// disappears.
    ///
    /// # Errors
    /// [`CheckFailed`] naming the step after which a resource was gone.
    pub async fn plain_stops_keep_resources(&self) -> CheckResult {
        const CHECK: &str = "plain_stops_keep_resources";
        let name = self.name("plain", "a");
        let (mut r, before) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut r, false).await?;
        self.expect_kept(
            CHECK,
            "stop(false) on every task and the connector",
            &r,
            &before,
        )
        .await?;
        for step in ["a restart", "a reconfiguration", "a pause or STOPPED"] {
            let mut again = self
                .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, false)
                .await?;
            self.expect_kept(CHECK, &format!("the start after {step}"), &again, &before)
                .await?;
            self.stop(CHECK, &mut again, false).await?;
            self.expect_kept(CHECK, &format!("{step} (stop(false))"), &again, &before)
                .await?;
        }
        let mut cleanup = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, false)
            .await?;
        self.delete_at_end(CHECK, &mut cleanup).await
    }

    /// A lower `tasks.max`: the tasks no longer wanted get `stop(false)` and nothing the
    /// probe lists disappears.
    ///
    /// # Errors
    /// [`CheckFailed`].
    pub async fn lower_tasks_max_keeps_resources(&self) -> CheckResult {
        const CHECK: &str = "lower_tasks_max_keeps_resources";
        let name = self.name("shrink", "a");
        let (mut r, before) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut r, false).await?;
        let fewer = self.tasks_max.saturating_sub(1).max(1);
        let mut smaller = self
            .start(CHECK, &name, FIRST_INCARNATION, fewer, false)
            .await?;
        self.expect_kept(
            CHECK,
            &format!("a restart with tasks.max {fewer}"),
            &smaller,
            &before,
        )
        .await?;
        self.stop(CHECK, &mut smaller, false).await?;
        self.expect_kept(
            CHECK,
            "stop(false) after lowering tasks.max",
            &smaller,
            &before,
        )
        .await?;
        let mut cleanup = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, false)
            .await?;
        self.delete_at_end(CHECK, &mut cleanup).await
    }

    /// `stop(true)` on the tasks then the connector removes everything the probe lists.
    ///
    /// # Errors
    /// [`CheckFailed`] listing what was left.
    pub async fn delete_removes_everything(&self) -> CheckResult {
        const CHECK: &str = "delete_removes_everything";
        let name = self.name("delete", "a");
        let (mut r, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.delete(CHECK, &mut r).await
    }

    /// `stop(true)` twice on the same instances, then `stop(true)` on fresh cleanup-only
    /// instances after the first cleanup ran: every call succeeds and changes nothing
    /// more (cleanup is at least once).
    ///
    /// # Errors
    /// [`CheckFailed`] naming the repeated call that failed or what it changed.
    pub async fn repeated_cleanup_is_a_no_op(&self) -> CheckResult {
        const CHECK: &str = "repeated_cleanup_is_a_no_op";
        let name = self.name("twice", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        let (mut r, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.delete(CHECK, &mut r).await?;
        self.stop(CHECK, &mut r, true).await.map_err(|e| {
            fail(
                CHECK,
                format!("a second stop(true) on the same instances: {}", e.message),
            )
        })?;
        self.expect_empty(CHECK, "a second stop(true)", &r).await?;
        let mut fresh = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        self.stop(CHECK, &mut fresh, true).await.map_err(|e| {
            fail(
                CHECK,
                format!(
                    "stop(true) on fresh cleanup-only instances after the cleanup ran: {}",
                    e.message
                ),
            )
        })?;
        self.expect_empty(CHECK, "a re-run cleanup", &fresh).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    /// `stop(true)` on cleanup-only instances of a connector whose start never ran:
    /// no error, nothing listed.
    ///
    /// # Errors
    /// [`CheckFailed`].
    pub async fn cleanup_without_start_succeeds(&self) -> CheckResult {
        const CHECK: &str = "cleanup_without_start_succeeds";
        let name = self.name("never", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        let mut r = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        if let Ok(owned) = self.owned(CHECK, &r).await
            && !owned.is_empty()
        {
            return Err(fail(
                CHECK,
                format!(
                    "a cleanup-only start provisioned {owned:?}: it must only prepare the stop(true)"
                ),
            ));
        }
        self.stop(CHECK, &mut r, true).await?;
        self.expect_empty(CHECK, "a cleanup of a connector that never started", &r)
            .await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    /// After a start that failed halfway, `stop(true)` on cleanup-only instances removes
    /// what exists, without error. The half-made state: the kit offers the resources the
    /// start made to [`Probe::remove`], in order, until it removes one.
    ///
    /// # Errors
    /// [`CheckFailed`]; with [`CheckFailed::checked_nothing`] when `Probe::remove`
    /// removed none of them (after deleting the connector, so nothing is left).
    pub async fn cleanup_after_half_start_succeeds(&self) -> CheckResult {
        const CHECK: &str = "cleanup_after_half_start_succeeds";
        let name = self.name("half", "a");
        let (mut r, owned) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut r, false).await?;
        let mut removed = None;
        for resource in &owned {
            let gone = self
                .probe
                .remove(resource)
                .await
                .map_err(|e| fail(CHECK, format!("probe could not remove {resource}: {e}")))?;
            if gone {
                removed = Some(resource);
                break;
            }
        }
        let mut cleanup = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        let Some(removed) = removed else {
            self.delete_at_end(CHECK, &mut cleanup).await?;
            return Err(nothing_checked(
                CHECK,
                format!(
                    "checked nothing: Probe::remove removed none of {owned:?} (it returned Ok(false) for each; the default does), so there was no half-made state to clean up: implement Probe::remove to delete one resource behind the plugin's back the way a start that failed halfway would leave it"
                ),
            ));
        };
        self.stop(CHECK, &mut cleanup, true).await?;
        self.expect_empty(
            CHECK,
            &format!("the cleanup after a half-made provisioning (the probe removed {removed})"),
            &cleanup,
        )
        .await
    }

    /// Two connectors of the plugin side by side: deleting one leaves every resource of
    /// the other.
    ///
    /// # Errors
    /// [`CheckFailed`] listing what of the survivor was removed.
    pub async fn deleting_one_connector_leaves_another(&self) -> CheckResult {
        const CHECK: &str = "deleting_one_connector_leaves_another";
        let (a, b) = (self.name("pair", "a"), self.name("pair", "b"));
        let (mut ra, _) = self.provisioned(CHECK, &a, self.tasks_max).await?;
        let (mut rb, owned_b) = self.provisioned(CHECK, &b, self.tasks_max).await?;
        self.delete(CHECK, &mut ra).await?;
        self.expect_kept(CHECK, &format!("deleting {a}"), &rb, &owned_b)
            .await?;
        self.delete_at_end(CHECK, &mut rb).await
    }

    /// A resource the probe marks as pre-existing (made by the user) is never removed:
    /// not by plain stops, not by the deletion.
    ///
    /// # Errors
    /// [`CheckFailed`] listing the user's resources that went; with
    /// [`CheckFailed::checked_nothing`] when [`Probe::pre_existing`] lists none.
    pub async fn pre_existing_resources_survive(&self) -> CheckResult {
        const CHECK: &str = "pre_existing_resources_survive";
        let name = self.name("user", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        if pre.is_empty() {
            return Err(nothing_checked(
                CHECK,
                format!(
                    "checked nothing: Probe::pre_existing lists no resource for {name} (the default lists none): implement it to list the resources the user made that the connector uses and must never remove (a watched table, a pre-declared queue), or leave this check out when the plugin uses none"
                ),
            ));
        }
        let (mut r, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut r, false).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await?;
        let mut again = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, false)
            .await?;
        self.delete_at_end(CHECK, &mut again).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    async fn expect_pre_existing(
        &self,
        check: &'static str,
        name: &str,
        before: &BTreeSet<String>,
    ) -> CheckResult {
        let now = self.pre_existing(check, name).await?;
        let gone: Vec<&String> = before.difference(&now).collect();
        if gone.is_empty() {
            Ok(())
        } else {
            Err(fail(
                check,
                format!(
                    "the user's own resources {gone:?} were removed: a connector must only remove what it provisioned"
                ),
            ))
        }
    }

    /// A late `stop(true)` of a deleted incarnation leaves what a re-created connector of
    /// the same name made (docs/connector-guide.md section 3, step 3). Incarnation 1 of
    /// the connector starts and provisions; its deletion's `stop(true)` overruns its
    /// timeout, so those instances are abandoned and the cleanup runs on fresh
    /// cleanup-only instances (docs/contract.md, "Abandoned instances stay visible"),
    /// which remove everything. The connector is created again (incarnation 2) and
    /// provisions; then the abandoned instances of incarnation 1 get their
    /// `stop(true)` after all, tasks then connector, and so do fresh cleanup-only ones
    /// (a retried cleanup): each must succeed and leave every resource of incarnation
    /// 2. Incarnation 2 then restarts over its own resources and its own deletion
    /// removes them.
    ///
    /// # Errors
    /// [`CheckFailed`] naming the late stop that removed incarnation 2's resources (or
    /// failed), or the step of incarnation 2 that no longer worked.
    pub async fn late_cleanup_leaves_a_re_created_connector(&self) -> CheckResult {
        const CHECK: &str = "late_cleanup_leaves_a_re_created_connector";
        let name = self.name("late", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        let (abandoned, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        let mut cleanup = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        self.delete(CHECK, &mut cleanup).await?;
        let mut second = self
            .start(CHECK, &name, SECOND_INCARNATION, self.tasks_max, false)
            .await
            .map_err(|e| {
                fail(
                    CHECK,
                    format!(
                        "{name} created again ({SECOND_INCARNATION}) after {FIRST_INCARNATION}'s cleanup removed everything: {}",
                        e.message
                    ),
                )
            })?;
        let made = self.owned(CHECK, &second).await?;
        let made_by = format!(
            "which {SECOND_INCARNATION} of {name} (the connector created again under the same name) made"
        );
        if made.is_empty() {
            return Err(fail(
                CHECK,
                format!(
                    "after the start of {SECOND_INCARNATION} the probe lists nothing that {name} owns: check the probe"
                ),
            ));
        }
        for (i, t) in abandoned.tasks.iter().enumerate() {
            self.stop_task(
                CHECK,
                format!("the late stop(true) of {FIRST_INCARNATION}'s task {name}/{i}"),
                t,
                true,
            )
            .await?;
            self.expect_other_incarnation_kept(
                CHECK,
                &format!("the late stop(true) of {FIRST_INCARNATION}'s task {name}/{i}"),
                &second,
                &made,
                &made_by,
            )
            .await?;
        }
        self.stop_connector(
            CHECK,
            format!("the late stop(true) of {FIRST_INCARNATION}'s connector instance {name}"),
            &abandoned.connector,
            true,
        )
        .await?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("the late stop(true) of {FIRST_INCARNATION}'s connector instance {name}"),
            &second,
            &made,
            &made_by,
        )
        .await?;
        let mut retried = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        self.stop(CHECK, &mut retried, true).await?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("a retried cleanup of {FIRST_INCARNATION} (stop(true) on fresh cleanup-only instances)"),
            &second,
            &made, &made_by)
        .await?;
        self.stop(CHECK, &mut second, false).await?;
        let mut restarted = self
            .start(CHECK, &name, SECOND_INCARNATION, self.tasks_max, false)
            .await
            .map_err(|e| {
                fail(
                    CHECK,
                    format!(
                        "{SECOND_INCARNATION} no longer restarts after {FIRST_INCARNATION}'s late cleanup: {}",
                        e.message
                    ),
                )
            })?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("{FIRST_INCARNATION}'s late cleanup and a restart of {SECOND_INCARNATION}"),
            &restarted,
            &made,
            &made_by,
        )
        .await?;
        self.delete_at_end(CHECK, &mut restarted).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    /// A start refuses resources another incarnation owns (docs/connector-guide.md
    /// section 3, step 3; docs/lifecycle.md: `audit.adopt=never`, the default, refuses).
    /// Incarnation 1 provisions and is deleted with `keep_resources` (`stop(false)` on
    /// everything: what it made stays, still naming it as owner); the connector is
    /// created again (incarnation 2) with the same config. Its start (the connector
    /// instance's or a task's) must fail, remove nothing, and the deletion of the
    /// refused connector (`stop(true)` on the instances that exist, then on fresh
    /// cleanup-only instances) must succeed and leave what incarnation 1 kept. The kit
    /// then removes the kept resources with a cleanup of incarnation 1.
    ///
    /// A plugin that takes kept resources over only when its config says so (like the
    /// audit sources' `audit.adopt`) passes with its default config.
    ///
    /// # Errors
    /// [`CheckFailed`] when incarnation 2 started over the kept resources, or a step
    /// removed some of them.
    pub async fn start_refuses_what_another_incarnation_kept(&self) -> CheckResult {
        const CHECK: &str = "start_refuses_what_another_incarnation_kept";
        let name = self.name("kept", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        let (mut first, kept) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut first, false).await?;
        self.expect_kept(
            CHECK,
            "a deletion with keep_resources (stop(false))",
            &first,
            &kept,
        )
        .await?;
        let made_by = format!(
            "which {FIRST_INCARNATION} of {name} made and kept (deleted with keep_resources)"
        );
        let mut second = self.instance(&name, self.tasks_max);
        let refused = self
            .start_into(
                CHECK,
                &mut second,
                SECOND_INCARNATION,
                self.tasks_max,
                false,
            )
            .await?;
        let Some(refusal) = refused else {
            return Err(fail(
                CHECK,
                format!(
                    "{name} created again ({SECOND_INCARNATION}) started over {kept:?}, which {FIRST_INCARNATION} made and kept (deleted with keep_resources): a start must refuse resources another incarnation owns, or a later cleanup of either incarnation removes what the other uses (docs/connector-guide.md section 3, step 3)"
                ),
            ));
        };
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("the refused start of {SECOND_INCARNATION} ({refusal})"),
            &first,
            &kept,
            &made_by,
        )
        .await?;
        self.stop(CHECK, &mut second, true).await.map_err(|e| {
            fail(
                CHECK,
                format!(
                    "deleting the refused {SECOND_INCARNATION} (stop(true) on the instances whose start failed): {}",
                    e.message
                ),
            )
        })?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("the stop(true) of the refused {SECOND_INCARNATION}"),
            &first,
            &kept,
            &made_by,
        )
        .await?;
        let mut rehosted = self
            .start(CHECK, &name, SECOND_INCARNATION, self.tasks_max, true)
            .await?;
        self.stop(CHECK, &mut rehosted, true).await?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!(
                "the cleanup of the refused {SECOND_INCARNATION} on fresh cleanup-only instances"
            ),
            &first,
            &kept,
            &made_by,
        )
        .await?;
        let mut tidy = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        self.delete_at_end(CHECK, &mut tidy).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    /// Fails when something of `before` is gone after `after`; `made_by` says whose it
    /// is ("which incarnation-2 of c made").
    async fn expect_other_incarnation_kept(
        &self,
        check: &'static str,
        after: &str,
        r: &Running,
        before: &BTreeSet<String>,
        made_by: &str,
    ) -> CheckResult {
        let gone = self.gone(check, r, before).await?;
        if gone.is_empty() {
            return Ok(());
        }
        Err(fail(
            check,
            format!(
                "{after} removed {gone:?}, {made_by}: neither a start nor a cleanup may remove what another incarnation owns, so check the owner first (docs/connector-guide.md section 3, step 3)"
            ),
        ))
    }

    /// For a sink plugin: records move through `put` and `flush` the way the executor
    /// drives them, and a sink acknowledges only what is durable. Each task gets
    /// [`RECORDS_PER_TASK`] records in two `put` batches, then one `flush` (after which
    /// the runtime acknowledges them and never delivers them again): right after that
    /// `flush` returned, [`Probe::delivered`] MUST list every one of them. A sink whose
    /// `flush` returns before the external system holds the records (a broker confirm
    /// not awaited, a buffer not written) fails here. The topic is the first of the
    /// config's `topics` (or `kit`).
    ///
    /// # Errors
    /// [`CheckFailed`] listing the acknowledged records the probe does not see, or
    /// saying the plugin is not a sink or the probe cannot read records.
    pub async fn sink_acknowledges_only_flushed_records(&self) -> CheckResult {
        const CHECK: &str = "sink_acknowledges_only_flushed_records";
        if self.plugin.kind() != PluginKind::Sink {
            return Err(fail(
                CHECK,
                format!("{} is not a sink plugin", self.plugin.name),
            ));
        }
        let name = self.name("flush", "a");
        let (mut r, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        let topic = r
            .config
            .get("topics")
            .and_then(|t| t.split(',').map(str::trim).find(|t| !t.is_empty()))
            .unwrap_or("kit")
            .to_owned();
        let mut sent = Vec::new();
        for (i, task) in r.tasks.iter().enumerate() {
            if !matches!(*task.lock().await, Task::Sink(_)) {
                continue;
            }
            let records: Vec<SinkRecord> = (0..RECORDS_PER_TASK)
                .map(|offset| SinkRecord {
                    topic: topic.clone(),
                    key: Some(format!("task-{i}").into_bytes()),
                    value: format!("{name}/task-{i}/record-{offset}").into_bytes(),
                    headers: vec![("kit".to_owned(), b"1".to_vec())],
                    timestamp_ms: Some(1_700_000_000_000 + offset as i64),
                    offset: offset + (i as u64) * RECORDS_PER_TASK,
                })
                .collect();
            sent.extend(records.iter().map(|r| r.value.clone()));
            let (first, second) = records.split_at(records.len() / 2);
            for batch in [first, second] {
                let (t, batch) = (task.clone(), batch.to_vec());
                self.call(
                    CHECK,
                    format!("task {name}/{i} put({} records)", batch.len()),
                    CallKind::Other,
                    async move { t.lock().await.put(batch).await },
                )
                .await?;
            }
            let next = BTreeMap::from([(topic.clone(), (i as u64 + 1) * RECORDS_PER_TASK)]);
            let t = task.clone();
            self.call(
                CHECK,
                format!("task {name}/{i} flush"),
                CallKind::Other,
                async move { t.lock().await.flush(&next).await },
            )
            .await?;
        }
        if sent.is_empty() {
            return Err(fail(
                CHECK,
                format!("{name} started no task: nothing was put"),
            ));
        }
        let held = self
            .probe
            .delivered(&name, &r.config)
            .await
            .map_err(|e| fail(CHECK, format!("probe could not read the records: {e}")))?
            .ok_or_else(|| {
                fail(
                    CHECK,
                    "the probe does not implement Probe::delivered: it must list the record values the external system holds".to_owned(),
                )
            })?;
        let held: BTreeSet<Vec<u8>> = held.into_iter().collect();
        let missing: Vec<String> = sent
            .iter()
            .filter(|v| !held.contains(*v))
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if !missing.is_empty() {
            return Err(fail(
                CHECK,
                format!(
                    "flush returned, so the runtime acknowledges these {} records and never delivers them again, but the external system does not hold them: {missing:?}",
                    missing.len()
                ),
            ));
        }
        self.delete_at_end(CHECK, &mut r).await
    }

    /// Every check that applies to the plugin's kind, in the order of [`CHECKS`] (the
    /// cleanup checks first); stops at the first failure. For a sink plugin this
    /// includes [`Kit::sink_acknowledges_only_flushed_records`]. A check that could not
    /// check anything ([`CheckFailed::checked_nothing`]: the probe does not list
    /// pre-existing resources, or cannot remove one) is skipped: listed in the
    /// [`Report`] and on stderr, the others still run.
    ///
    /// # Errors
    /// The first [`CheckFailed`] that is not a skip.
    pub async fn all(&self) -> Result<Report, CheckFailed> {
        let mut report = Report::default();
        for check in checks_for(self.plugin.kind()) {
            let outcome = self.run(check).await;
            if let Err(e) = &outcome
                && e.checked_nothing
            {
                // Shown with --nocapture or when the test fails: a skip must not pass unseen.
                eprintln!("wharf-testkit: skipped {e}");
            }
            record(&mut report, check, outcome)?;
        }
        Ok(report)
    }

    /// Runs the check named `check` (one of [`CHECKS`]).
    ///
    /// # Errors
    /// The check's [`CheckFailed`]; one naming `check` when no check has that name.
    pub async fn run(&self, check: &str) -> CheckResult {
        match check {
            "delete_removes_everything" => self.delete_removes_everything().await,
            "repeated_cleanup_is_a_no_op" => self.repeated_cleanup_is_a_no_op().await,
            "cleanup_without_start_succeeds" => self.cleanup_without_start_succeeds().await,
            "cleanup_after_half_start_succeeds" => self.cleanup_after_half_start_succeeds().await,
            "plain_stops_keep_resources" => self.plain_stops_keep_resources().await,
            "lower_tasks_max_keeps_resources" => self.lower_tasks_max_keeps_resources().await,
            "deleting_one_connector_leaves_another" => {
                self.deleting_one_connector_leaves_another().await
            }
            "pre_existing_resources_survive" => self.pre_existing_resources_survive().await,
            "late_cleanup_leaves_a_re_created_connector" => {
                self.late_cleanup_leaves_a_re_created_connector().await
            }
            "start_refuses_what_another_incarnation_kept" => {
                self.start_refuses_what_another_incarnation_kept().await
            }
            "sink_acknowledges_only_flushed_records" => {
                self.sink_acknowledges_only_flushed_records().await
            }
            other => Err(fail(
                "run",
                format!("no check is named {other:?}; the checks: {CHECKS:?}"),
            )),
        }
    }
}

/// One cleanup step of a deletion, as the runtime's finalizer has them.
#[derive(Debug, Clone, Copy)]
enum Unit {
    /// Task `n`.
    Task(usize),
    /// The connector instance.
    Connector,
}

/// The context of task `i` of `r` (its incarnation, `cleanup_only` or not).
fn task_context(r: &Running, i: usize, cleanup_only: bool) -> TaskContext {
    TaskContext {
        connector: r.name.clone(),
        task: i as u32,
        incarnation: r.incarnation.clone(),
        cleanup_only,
        executor_id: KIT_EXECUTOR_ID.to_owned(),
        connector_config: r.config.clone(),
        offsets: BTreeMap::new(),
        cancel: CancellationToken::new(),
    }
}

/// How long the runtime waits before attempt `failed + 1` of a cleanup step after
/// `failed` failed ones: 200 ms doubling, at most 10 s (docs/lifecycle.md, "Deletion").
/// Pure.
pub fn retry_backoff(failed: u32) -> Duration {
    let ms = 200u64.saturating_mul(1u64 << failed.saturating_sub(1).min(16));
    Duration::from_millis(ms.min(10_000))
}

/// Why a check failed when `what` failed with `error` after `attempts` attempts (a
/// `stop(deleted)`). Pure.
fn cleanup_failed_text(
    what: &str,
    error: &dyn std::fmt::Display,
    attempts: u32,
    deleted: bool,
) -> String {
    if !deleted || attempts <= 1 {
        return format!("{what} failed: {error}");
    }
    format!(
        "{what} failed: {error}; every one of {attempts} attempts failed (the first on the instance, the others on fresh cleanup-only instances, as the runtime retries a cleanup up to cleanup.max.attempts; Kit::cleanup_attempts sets the number)"
    )
}

/// The check about deletion itself, which a failed tidy-up deletion points to.
const CLEANUP_CHECK: &str = "delete_removes_everything";

/// Every check, in the order [`Kit::all`] runs them: the four about cleanup first, so
/// that a cleanup bug is reported by the check about it rather than by the deletion
/// that ends a check about plain stops or records (each check but those ends with one).
pub const CHECKS: [&str; 11] = [
    CLEANUP_CHECK,
    "repeated_cleanup_is_a_no_op",
    "cleanup_without_start_succeeds",
    "cleanup_after_half_start_succeeds",
    "plain_stops_keep_resources",
    "lower_tasks_max_keeps_resources",
    "deleting_one_connector_leaves_another",
    "pre_existing_resources_survive",
    "late_cleanup_leaves_a_re_created_connector",
    "start_refuses_what_another_incarnation_kept",
    "sink_acknowledges_only_flushed_records",
];

/// The checks of [`CHECKS`] that apply to a plugin of `kind`, in order. Pure.
fn checks_for(kind: PluginKind) -> impl Iterator<Item = &'static str> {
    CHECKS
        .into_iter()
        .filter(move |c| kind == PluginKind::Sink || *c != "sink_acknowledges_only_flushed_records")
}

/// The error text of a plugin call that panicked with `payload`, as the executor words
/// it (`plugin panicked: <message>`). Pure.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".to_owned());
    format!("plugin panicked: {msg}")
}

fn fail(check: &'static str, message: String) -> CheckFailed {
    CheckFailed {
        check,
        message,
        checked_nothing: false,
    }
}

/// A check that could not check anything: `message` says what to implement.
fn nothing_checked(check: &'static str, message: String) -> CheckFailed {
    CheckFailed {
        check,
        message,
        checked_nothing: true,
    }
}

/// Adds the outcome of `check` to `report`: a pass, a skip (it checked nothing), or the
/// failure that ends [`Kit::all`]. Pure.
fn record(report: &mut Report, check: &'static str, outcome: CheckResult) -> CheckResult {
    match outcome {
        Ok(()) => report.passed.push(check),
        Err(e) if e.checked_nothing => report.skipped.push(Skipped {
            check: e.check,
            reason: e.message,
        }),
        Err(e) => return Err(e),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_kind_gets_its_own_bound_naming_the_runtime_setting() {
        let b = Bounds {
            call: Duration::from_secs(1),
            stop: Duration::from_secs(2),
            cleanup: Duration::from_secs(3),
        };
        let (d, why) = bound_of(CallKind::Other, &b);
        assert_eq!(d, Duration::from_secs(1));
        assert!(why.contains("Kit::call_timeout"), "{why}");
        let (d, why) = bound_of(CallKind::Stop { deleted: false }, &b);
        assert_eq!(d, Duration::from_secs(2));
        assert!(
            why.contains("--graceful-timeout-ms") && why.contains("Kit::stop_timeout"),
            "{why}"
        );
        let (d, why) = bound_of(CallKind::Stop { deleted: true }, &b);
        assert_eq!(d, Duration::from_secs(3));
        assert!(
            why.contains("cleanup.timeout.ms") && why.contains("Kit::cleanup_timeout"),
            "{why}"
        );
    }

    #[test]
    fn the_default_bounds_follow_the_runtime_defaults() {
        let b = Bounds::default();
        assert_eq!(b.stop, Duration::from_millis(10_000));
        assert_eq!(
            b.cleanup,
            Duration::from_millis(u64::from(wharf::sdk::DEFAULT_CLEANUP_TIMEOUT_MS))
        );
    }

    #[test]
    fn the_cleanup_checks_run_first_and_the_sink_check_only_for_a_sink() {
        let source: Vec<_> = checks_for(PluginKind::Source).collect();
        let sink: Vec<_> = checks_for(PluginKind::Sink).collect();
        assert_eq!(&source[..4], &CHECKS[..4]);
        assert!(
            source[..4]
                .iter()
                .all(|c| c.contains("cleanup") || c.starts_with("delete_"))
        );
        assert!(!source.contains(&"sink_acknowledges_only_flushed_records"));
        assert_eq!(sink.len(), CHECKS.len());
        assert_eq!(source.len(), CHECKS.len() - 1);
    }

    #[test]
    fn the_retry_backoff_is_the_runtimes() {
        let ms: Vec<u128> = (1..=8).map(|n| retry_backoff(n).as_millis()).collect();
        assert_eq!(ms, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        assert_eq!(retry_backoff(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn a_cleanup_that_failed_every_attempt_says_how_it_was_retried() {
        let once = cleanup_failed_text("connector c stop(true)", &"gone", 1, true);
        assert_eq!(once, "connector c stop(true) failed: gone");
        let plain = cleanup_failed_text("task c/0 stop(false)", &"x", 1, false);
        assert_eq!(plain, "task c/0 stop(false) failed: x");
        let five = cleanup_failed_text("connector c stop(true)", &"gone", 5, true);
        assert!(
            five.starts_with("connector c stop(true) failed: gone; every one of 5 attempts failed")
                && five.contains("fresh cleanup-only instances")
                && five.contains("Kit::cleanup_attempts"),
            "{five}"
        );
    }

    #[test]
    fn all_records_passes_and_skips_and_stops_at_a_failure() {
        let mut report = Report::default();
        assert!(record(&mut report, "a", Ok(())).is_ok());
        let skip = nothing_checked("b", "checked nothing: implement X".to_owned());
        assert!(record(&mut report, "b", Err(skip)).is_ok());
        let failed = record(&mut report, "c", Err(fail("c", "removed y".to_owned())));
        assert_eq!(failed.unwrap_err().message, "removed y");
        assert_eq!(report.passed, ["a"]);
        assert_eq!(
            report.skipped,
            [Skipped {
                check: "b",
                reason: "checked nothing: implement X".to_owned()
            }]
        );
        assert_eq!(
            report.to_string(),
            "1 checks passed, 1 skipped:\n  [b] checked nothing: implement X"
        );
    }

    #[test]
    fn a_panic_reads_as_the_executor_reports_it() {
        assert_eq!(panic_text(&"boom"), "plugin panicked: boom");
        assert_eq!(panic_text(&format!("at {}", 3)), "plugin panicked: at 3");
        assert_eq!(
            panic_text(&7_u32),
            "plugin panicked: non-text panic payload"
        );
    }

    #[test]
    fn an_overrun_names_the_call_the_bound_and_the_remedy() {
        let t = overrun_text(
            "task c/0 stop(false)",
            Duration::from_millis(1500),
            "SETTING",
        );
        assert!(
            t.starts_with("task c/0 stop(false) did not return within 1500 ms, SETTING;")
                && t.contains("spawn_blocking"),
            "{t}"
        );
    }
}
