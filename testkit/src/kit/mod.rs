//! The kit: a plugin, its configs and the probe, and the machinery that drives plugin
//! instances the way an executor does (every call bounded, on the kit's plugin runtime;
//! tasks stopped before the connector instance; a failed cleanup retried on fresh
//! cleanup-only instances). The checks themselves are in [`checks`].

mod checks;
mod ledger;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use wharf_sdk::{
    CancellationToken, ConfigMap, Connector, ConnectorContext, MemoryLedger, Plugin, PluginResult,
    ResourceOwner, Resources, SinkRecord, SinkTask, SourceTask, TaskContext, TaskFactory,
    TopicPartition,
};

use crate::bounds::{Bounds, CallKind, PluginRuntime, bound_of, overrun_text, panic_text};
use crate::report::{CLEANUP_CHECK, CheckFailed, CheckResult, fail};
use crate::{ConfigFor, FIRST_INCARNATION, KIT_EXECUTOR_ID, Probe};

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
    /// Each connector name's resource ledger, as the control plane keeps one per
    /// connector.
    ledgers: std::sync::Mutex<BTreeMap<String, Arc<MemoryLedger>>>,
    /// A plugin that records nothing in its ledger fails the ledger checks (instead of
    /// their being skipped).
    ledger_required: bool,
}

/// A plugin instance shared with the call running on the plugin runtime. A call that
/// overran keeps it locked, so nothing calls that instance again (as the executor never
/// calls an abandoned one).
type Shared<T> = Arc<tokio::sync::Mutex<T>>;

/// `value` made shareable with the calls the kit runs on its plugin runtime.
fn shared<T>(value: T) -> Shared<T> {
    Arc::new(tokio::sync::Mutex::new(value))
}

/// A task instance of either kind, as the plugin's factory made it.
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
    async fn flush(&mut self, offsets: &BTreeMap<TopicPartition, u64>) -> PluginResult<()> {
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
    /// Its connector's resource ledger.
    ledger: Arc<MemoryLedger>,
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
            cleanup_attempts: wharf_sdk::DEFAULT_CLEANUP_MAX_ATTEMPTS,
            runtime: PluginRuntime::default(),
            last_task_configs: std::sync::Mutex::new(BTreeMap::new()),
            ledgers: std::sync::Mutex::new(BTreeMap::new()),
            ledger_required: false,
        }
    }

    /// Makes the ledger checks fail (rather than skip) a plugin that records nothing in
    /// its resource ledger while the probe lists what it owns (docs/resources.md). Every
    /// built-in plugin is checked this way.
    pub fn ledger_required(mut self) -> Self {
        self.ledger_required = true;
        self
    }

    /// The resource ledger of connector `name` (one per name, as the control plane
    /// keeps it).
    fn ledger_of(&self, name: &str) -> Arc<MemoryLedger> {
        self.ledgers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
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

    /// Bound on `start`, `task_configs`, `put` and `flush` (default
    /// [`CALL_TIMEOUT_SECS`](crate::CALL_TIMEOUT_SECS)).
    pub fn call_timeout(mut self, bound: Duration) -> Self {
        self.bounds.call = bound;
        self
    }

    /// Bound on a plain `stop_with(false)` (default
    /// [`STOP_TIMEOUT_MS`](crate::STOP_TIMEOUT_MS), the executor's default
    /// `--graceful-timeout-ms`). Raise it only for a plugin whose documentation tells
    /// operators to raise `--graceful-timeout-ms` as much.
    pub fn stop_timeout(mut self, bound: Duration) -> Self {
        self.bounds.stop = bound;
        self
    }

    /// Bound on a `stop_with(true)` (default
    /// [`CLEANUP_TIMEOUT_MS`](crate::CLEANUP_TIMEOUT_MS), the default
    /// `cleanup.timeout.ms`). Raise it only for a plugin whose documentation tells
    /// operators to set `cleanup.timeout.ms` as high.
    pub fn cleanup_timeout(mut self, bound: Duration) -> Self {
        self.bounds.cleanup = bound;
        self
    }

    /// Attempts of each cleanup step (one task's or the connector instance's
    /// `stop_with(true)`) before the check fails; default
    /// [`wharf_sdk::DEFAULT_CLEANUP_MAX_ATTEMPTS`] (5), the runtime's default
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
            ledger: self.ledger_of(name),
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
        )
        .with_resources(Resources::new(r.ledger.clone(), ResourceOwner::Connector));
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
                )
                .with_resources(Resources::new(r.ledger.clone(), ResourceOwner::Connector));
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
        errant_reporter: None,
        sink_seek: None,
        resources: Resources::new(r.ledger.clone(), ResourceOwner::Task(i as u32)),
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
