//! A plugin instance in its cell: one call at a time, `start` first, the one stop, then
//! the plugin dropped. The same cell serves source tasks, sink tasks and connectors.

use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use wharf::sdk::{ConfigMap, PluginResult};
use wharf::task::{TaskKind, spawn};

use super::lock;
use super::stop::StopOutcome;
use crate::runtime::PluginSlot;

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
}

/// The stop side of a [`PluginCell`], whatever its plugin kind, so that one stop path
/// (`super::stop`) serves sources, sinks and connectors.
#[async_trait::async_trait]
pub(crate) trait CellStop: Send + Sync {
    /// Waits (until `deadline`) for the call in progress, then runs the plugin's stop on
    /// `slot` and drops the plugin after it; `None` when the deadline passed first. The
    /// flag is decided by `flag` once the wait is over (a destructive stop is confirmed
    /// against the lease at the last moment) and returned with the handle.
    async fn spawn_stop(
        &self,
        slot: &PluginSlot,
        flag: &(dyn Fn() -> bool + Send + Sync),
        deadline: Instant,
    ) -> Option<(bool, JoinHandle<Result<(), String>>)>;

    /// Ends the instance's plugin calls once its stop ended with `outcome`: every call still
    /// pending is cancelled. When the stop timed out the instance is abandoned: a call
    /// stuck in a blocked thread counts against the plugin runtime's workers (the
    /// write-off, `crate::runtime`) until it returns, and then the plugin is dropped (an
    /// abandoned instance gets no stop; dropping it closes what it holds, such as a
    /// database connection and the task that drives it).
    fn end_calls(&self, slot: &PluginSlot, outcome: StopOutcome);

    /// The start never reached the plugin (a config-provider reference could not be
    /// resolved): the plugin is dropped unstarted and the cell unlocked, so that the
    /// stop finds no call in progress and calls no plugin (the SDK promises `start`
    /// first). The stop then completes at once.
    fn never_started(&self);
}

#[async_trait::async_trait]
impl<P: PluginCalls> CellStop for PluginCell<P> {
    async fn spawn_stop(
        &self,
        slot: &PluginSlot,
        flag: &(dyn Fn() -> bool + Send + Sync),
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

    fn never_started(&self) {
        if let Some(mut guard) = lock(&self.start_guard).take() {
            *guard = P::dropped();
        }
    }

    fn end_calls(&self, slot: &PluginSlot, outcome: StopOutcome) {
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
