//! What connector instances and tasks share: their state, and the stop that runs at most
//! once and is replayed to every later caller.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use wharf::pb::v1 as pb;
use wharf::sdk::{ConfigMap, PluginResult};

use super::{lock, panic_text};
use crate::runtime::PluginSlot;
use wharf::task::{TaskKind, spawn};

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

/// How a stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// The plugin's stop returned Ok.
    Stopped,
    /// The plugin's stop returned an error or panicked.
    Failed,
    /// The stop overran its timeout: the instance was abandoned and its output fenced.
    TimedOut,
}

/// What an instance tells the control plane once its stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterStop {
    /// It stopped on its own initiative (not on a control-plane request): report it
    /// UNASSIGNED so that the control plane places it again.
    ReportUnassigned,
    /// Stopped as asked: the stop's answer says so, nothing more to report.
    Nothing,
    /// The stop failed or timed out: report the instance's state (FAILED).
    ReportState,
}

/// The decision behind [`AfterStop`], the same for connector instances and tasks.
pub fn after_stop(outcome: StopOutcome, self_initiated: bool) -> AfterStop {
    match outcome {
        StopOutcome::Stopped if self_initiated => AfterStop::ReportUnassigned,
        StopOutcome::Stopped => AfterStop::Nothing,
        StopOutcome::Failed | StopOutcome::TimedOut => AfterStop::ReportState,
    }
}

/// What happened when an instance was stopped; kept so that a repeated stop reports it.
#[derive(Debug, Clone)]
pub struct StopRecord {
    /// How it ended.
    pub outcome: StopOutcome,
    /// The flag the stop ran with.
    pub connector_deleted: bool,
    /// The plugin's error text, or why the stop timed out.
    pub error: Option<String>,
    /// Generation of the stopped instance.
    pub generation: u64,
    /// Time the stop took.
    pub elapsed: Duration,
}

/// A stop's record and whether this caller only replayed it.
#[derive(Debug, Clone)]
pub struct StopResult {
    /// The record of the one stop that ran.
    pub record: StopRecord,
    /// True when this request found the stop already claimed: nothing ran for it.
    pub replayed: bool,
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
}

impl Lifecycle {
    pub fn new(generation: u64, cleanup_only: bool) -> Self {
        Self {
            generation,
            cleanup_only,
            state: Mutex::new(InstanceState::Starting),
            claimed: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            done: Arc::new(watch::channel(None).0),
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

/// The calls every plugin instance has, whatever its kind: start (with its kind's
/// context) and the one stop. Lets one [`PluginCell`] serve sources, sinks and connectors.
#[async_trait::async_trait]
pub(crate) trait PluginCalls: Send + 'static {
    /// `TaskContext` or `ConnectorContext`.
    type Context: Send + 'static;
    /// The plugin's `start`.
    async fn start_call(&mut self, ctx: Self::Context, config: ConfigMap) -> PluginResult<()>;
    /// The plugin's `stop_with`.
    async fn stop_call(&mut self, connector_deleted: bool) -> PluginResult<()>;
    /// What stays in the plugin's place after its stop (the plugin itself is dropped).
    fn dropped() -> Self;
}

macro_rules! plugin_calls {
    ($trait:ident, $ctx:ty) => {
        #[async_trait::async_trait]
        impl PluginCalls for Box<dyn wharf::sdk::$trait> {
            type Context = $ctx;
            async fn start_call(&mut self, ctx: $ctx, config: ConfigMap) -> PluginResult<()> {
                self.start(ctx, config).await
            }
            async fn stop_call(&mut self, connector_deleted: bool) -> PluginResult<()> {
                self.stop_with(connector_deleted).await
            }
            fn dropped() -> Self {
                Box::new(Dropped)
            }
        }
    };
}

plugin_calls!(SourceTask, wharf::sdk::TaskContext);
plugin_calls!(SinkTask, wharf::sdk::TaskContext);
plugin_calls!(Connector, wharf::sdk::ConnectorContext);

/// A plugin instance behind an async mutex (whoever holds it is the one call in progress,
/// which is how calls never overlap), locked from creation until `start` ran so that a
/// stop arriving during start waits for it.
pub(crate) struct PluginCell<P> {
    pub cell: Arc<AsyncMutex<P>>,
    start_guard: Mutex<Option<OwnedMutexGuard<P>>>,
}

impl<P: PluginCalls> PluginCell<P> {
    pub fn new(plugin: P) -> Self {
        let cell = Arc::new(AsyncMutex::new(plugin));
        let guard = cell.clone().try_lock_owned().ok();
        Self {
            cell,
            start_guard: Mutex::new(guard),
        }
    }

    /// Runs the plugin's start on the instance's `slot`.
    pub fn spawn_start(
        &self,
        slot: &PluginSlot,
        ctx: P::Context,
        config: ConfigMap,
    ) -> JoinHandle<Result<(), String>> {
        let guard = lock(&self.start_guard).take();
        let cell = self.cell.clone();
        slot.spawn("plugin start", async move {
            let mut g = match guard {
                Some(g) => g,
                None => cell.lock_owned().await,
            };
            g.start_call(ctx, config).await.map_err(|e| e.to_string())
        })
    }

    /// Waits (until `deadline`) for the call in progress, then runs the plugin's stop on
    /// `slot` and drops the plugin after it; `None` when the deadline passed first. The
    /// flag is decided by `flag` once the wait is over (a destructive stop is confirmed
    /// against the lease at the last moment) and returned with the handle.
    pub async fn spawn_stop(
        &self,
        slot: &PluginSlot,
        flag: impl FnOnce() -> bool,
        deadline: Instant,
    ) -> Option<(bool, JoinHandle<Result<(), String>>)> {
        let mut g = tokio::time::timeout_at(deadline, self.cell.clone().lock_owned())
            .await
            .ok()?;
        let connector_deleted = flag();
        // The plugin's own stop, exported as a span under the request that stopped it
        // (wharf::trace::DirectSpan), and a span of the log lines inside it.
        let exported = wharf::trace::DirectSpan::child(
            &wharf::trace::TraceContext::current(),
            "plugin stop",
            [wharf::trace::KeyValue::new(
                "connector_deleted",
                connector_deleted,
            )],
        );
        let span = tracing::info_span!("plugin stop", connector_deleted);
        let handle = slot.spawn(
            "plugin stop",
            tracing::Instrument::instrument(
                exported.around(async move {
                    let result = g
                        .stop_call(connector_deleted)
                        .await
                        .map_err(|e| e.to_string());
                    // After stop the instance is dropped (SDK guarantee).
                    *g = P::dropped();
                    result
                }),
                span,
            ),
        );
        Some((connector_deleted, handle))
    }

    /// Ends the instance's plugin calls once its stop ended with `outcome`: every call still
    /// pending is cancelled. When the stop timed out the instance is abandoned: a call
    /// stuck in a blocked thread counts against the plugin runtime's workers (the
    /// write-off, `crate::runtime`) until it returns, and then the plugin is dropped (an
    /// abandoned instance gets no stop; dropping it closes what it holds, such as a
    /// database connection and the task that drives it).
    pub fn end_calls(&self, slot: &PluginSlot, outcome: StopOutcome) {
        match outcome {
            StopOutcome::Stopped | StopOutcome::Failed => slot.shut_down(),
            StopOutcome::TimedOut => {
                slot.abandon();
                let cell = self.cell.clone();
                spawn(TaskKind::Detached, "drop abandoned plugin", async move {
                    let mut plugin = cell.lock_owned().await;
                    let abandoned = std::mem::replace(&mut *plugin, P::dropped());
                    drop(plugin);
                    // Plugin code (its Drop), kept off the executor's workers.
                    drop(tokio::task::spawn_blocking(move || drop(abandoned)));
                });
            }
        }
    }
}

/// Awaits a spawned plugin stop until `deadline`; on overrun the call is aborted (it may
/// still hold its plugin worker: the instance is abandoned either way).
pub(crate) async fn await_plugin_stop(
    handle: JoinHandle<Result<(), String>>,
    deadline: Instant,
    timeout: Duration,
) -> (StopOutcome, Option<String>) {
    let abort = handle.abort_handle();
    match tokio::time::timeout_at(deadline, handle).await {
        Ok(Ok(Ok(()))) => (StopOutcome::Stopped, None),
        Ok(Ok(Err(e))) => (StopOutcome::Failed, Some(e)),
        Ok(Err(join)) => (StopOutcome::Failed, Some(panic_text(join))),
        Err(_) => {
            abort.abort();
            (StopOutcome::TimedOut, Some(timed_out_text(timeout, "stop")))
        }
    }
}

/// Why a stop timed out.
pub(crate) fn timed_out_text(timeout: Duration, waiting_for: &str) -> String {
    format!(
        "stop timed out after {} ms waiting for {waiting_for}; instance abandoned and its output fenced",
        timeout.as_millis()
    )
}

/// What stays in an instance's place once its stop returned: the plugin itself is
/// dropped then (its connections closed), and nothing calls this placeholder.
pub(crate) struct Dropped;

const DROPPED: &str = "the instance was stopped and dropped";

#[async_trait::async_trait]
impl wharf::sdk::SourceTask for Dropped {
    async fn start(
        &mut self,
        _ctx: wharf::sdk::TaskContext,
        _config: wharf::sdk::ConfigMap,
    ) -> wharf::sdk::PluginResult<()> {
        Err(DROPPED.into())
    }

    async fn poll(&mut self) -> wharf::sdk::PluginResult<Vec<wharf::sdk::SourceRecord>> {
        Err(DROPPED.into())
    }
}

#[async_trait::async_trait]
impl wharf::sdk::SinkTask for Dropped {
    async fn start(
        &mut self,
        _ctx: wharf::sdk::TaskContext,
        _config: wharf::sdk::ConfigMap,
    ) -> wharf::sdk::PluginResult<()> {
        Err(DROPPED.into())
    }

    async fn put(&mut self, _records: Vec<wharf::sdk::SinkRecord>) -> wharf::sdk::PluginResult<()> {
        Err(DROPPED.into())
    }
}

#[async_trait::async_trait]
impl wharf::sdk::Connector for Dropped {
    async fn start(
        &mut self,
        _ctx: wharf::sdk::ConnectorContext,
        _config: wharf::sdk::ConfigMap,
    ) -> wharf::sdk::PluginResult<()> {
        Err(DROPPED.into())
    }

    async fn task_configs(
        &mut self,
        _max_tasks: u32,
    ) -> wharf::sdk::PluginResult<Vec<wharf::sdk::ConfigMap>> {
        Err(DROPPED.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_initiated_clean_stop_is_reported_unassigned() {
        assert_eq!(
            after_stop(StopOutcome::Stopped, true),
            AfterStop::ReportUnassigned
        );
    }

    #[test]
    fn a_requested_clean_stop_reports_nothing_more() {
        assert_eq!(after_stop(StopOutcome::Stopped, false), AfterStop::Nothing);
    }

    #[test]
    fn a_failed_or_timed_out_stop_reports_the_state_either_way() {
        for outcome in [StopOutcome::Failed, StopOutcome::TimedOut] {
            for self_initiated in [true, false] {
                assert_eq!(after_stop(outcome, self_initiated), AfterStop::ReportState);
            }
        }
    }
}
